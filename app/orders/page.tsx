import type { Metadata } from 'next';
import { OrderList } from '@/app/_components/OrderList';

export const metadata: Metadata = { title: 'PayOnce · 订单' };

export default function Page() {
  return <OrderList />;
}
