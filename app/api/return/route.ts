/**
 * Where a gateway's own page (Alipay page pay, 2C2P's hosted payment page) sends the buyer back to:
 * Alipay with a GET and signed parameters, 2C2P with a form POST of `paymentResponse`. Neither is
 * trusted or even read: what the buyer's browser carries proves nothing, and the order is settled only
 * by the gateway's signed notification or by asking the gateway. The buyer lands on the checkout, which
 * resumes the saved attempt, or — with no attempt saved there — shows the order by the return link's
 * token (server/checkout/return-address.ts).
 */
import { returnLandingPath } from '@/server/checkout/return-address';

function backToCheckout(request: Request): Response {
  const url = new URL(request.url);
  // A relative Location: the browser stays on the origin it came back to, which is the one it paid
  // from (the return URL was built from it), so its session and saved attempt are there. 303: a POST
  // from 2C2P's page must become a GET of the checkout, never a re-POST.
  return new Response(null, {
    status: 303,
    headers: {
      Location: returnLandingPath(url.searchParams.get('orderId'), url.searchParams.get('t')),
      'Cache-Control': 'private, no-store',
    },
  });
}

export const GET = backToCheckout;
export const POST = backToCheckout;
