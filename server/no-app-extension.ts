/** `#app-extension` in the product: none (./app-extension.ts). */
import type { AppExtension } from './app-extension';

const extension: AppExtension | undefined = undefined;
export default extension;
