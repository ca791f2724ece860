import { appServices } from '@/server/app/services';
import { sessionSecret } from '@/server/http/session';
import { createTrpcHandler } from '@/server/trpc/http';

const handler = createTrpcHandler({ services: appServices, sessionSecret });

export { handler as GET, handler as POST };
