/** The operators' sign-in, sign-out and "who am I" (server/operators/http.ts). */
import { appServices } from '@/server/app/services';
import { clientAddress } from '@/server/http/rate-limit';
import { serverEnv } from '@/server/config/env';
import { handleOperatorSession } from '@/server/operators/http';

function handler(request: Request): Promise<Response> {
  return handleOperatorSession(request, appServices().db, clientAddress(request.headers, serverEnv().TRUST_PROXY));
}

export { handler as GET, handler as POST, handler as DELETE };
