/**
 * Where a gateway's own page (Alipay page pay, 2C2P's hosted payment page) sends the buyer back to:
 * Alipay with a GET and signed parameters, 2C2P with a form POST of `paymentResponse`. Neither is
 * trusted or even read: what the buyer's browser carries proves nothing, and the order is settled only
 * by the gateway's signed notification or by asking the gateway. The buyer lands on the checkout, which
 * resumes the saved attempt and shows the order's state as it settles.
 */
import { NextResponse } from 'next/server';
import { appServices } from '../../../server/app-services';

function backToCheckout(): NextResponse {
  // The public address, not the one this request reached: the checkout keeps the open attempt in the
  // browser's storage for its own origin (127.0.0.1 and localhost are two origins to a browser).
  // 303: a POST from 2C2P's page must become a GET of the checkout, never a re-POST.
  return NextResponse.redirect(new URL('/', appServices().publicBaseUrl), 303);
}

export const GET = backToCheckout;
export const POST = backToCheckout;
