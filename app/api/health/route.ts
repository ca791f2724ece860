import { checkHealth } from '@/server/app/health';
import { appServices } from '@/server/app/services';

/** Ready when the database answers: what a load balancer or the test harness waits for. */
export function GET(): Promise<Response> {
  return checkHealth(() => appServices().db);
}
