// What the browser scripts share: their environment and Debian's Chromium,
// headless, through playwright-core from $BUZZ_NPM_PREFIX.
import { createRequire } from 'node:module';
import path from 'node:path';

export const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};

export function check(cond, msg) { if (!cond) throw new Error(msg); }

export async function launch() {
  const require = createRequire(path.join(env('BUZZ_NPM_PREFIX'), 'node_modules', 'x.js'));
  const { chromium } = require('playwright-core');
  return chromium.launch({
    executablePath: env('CHROMIUM'),
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--no-first-run'],
  });
}
