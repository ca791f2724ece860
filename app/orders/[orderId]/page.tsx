import type { Metadata } from 'next';
import { BehindTheScenes } from '@/app/_components/BehindTheScenes';

export const metadata: Metadata = { title: 'PayOnce · 幕后' };

export default async function Page({ params }: { params: Promise<{ orderId: string }> }) {
  const { orderId } = await params;
  return <BehindTheScenes orderId={orderId} />;
}
