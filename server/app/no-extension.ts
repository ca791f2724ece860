/** `#app-extension` in the product: none (./extension.ts). */
import type { AppExtension } from './extension';

const extension: AppExtension | undefined = undefined;
export default extension;
