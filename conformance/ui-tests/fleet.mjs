// The Start page with a fleet (issue 35 "Figures": the page's first paint
// with 1 000 agents, goal ≤ 1 s), in Debian's Chromium, headless. Run by
// `bench presence` (`conformance/src/bench/presence.rs`), which passes
// START_URL, CHROMIUM, BUZZ_NPM_PREFIX and AGENTS in the environment.
// The last line is `RESULT <json>`:
//   fcp_ms     the page's first contentful paint (the browser's own timing);
//   cards_ms   navigation start to every agent's card drawn;
//   online_ms  navigation start to every card's dot `online` (the page's own
//              presence watch through the relay);
//   online     how many dots were online then (all of them, or fewer when
//              the bounded wait ended first).
// Figures only: every wait is bounded, nothing is asserted on time.
import { env, launch } from './browser.mjs';

const AGENTS = Number(env('AGENTS'));

const browser = await launch();
try {
  const page = await (await browser.newContext({ viewport: { width: 1100, height: 1200 } })).newPage();
  await page.goto(env('START_URL'));
  await page.waitForFunction((n) => document.querySelectorAll('li.agent .state').length >= n, AGENTS, { timeout: 60000 });
  const cards_ms = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r(performance.now()))));
  const fcp_ms = await page.evaluate(() => {
    const p = performance.getEntriesByName('first-contentful-paint')[0];
    return p ? p.startTime : null;
  });
  const online = () => page.evaluate(() => document.querySelectorAll('li.agent[data-state="online"]').length);
  let online_ms = null;
  try {
    await page.waitForFunction((n) => document.querySelectorAll('li.agent[data-state="online"]').length >= n, AGENTS, { timeout: 90000, polling: 50 });
    online_ms = await page.evaluate(() => performance.now());
  } catch (e) {
    if (!String(e).includes('Timeout')) throw e;
  }
  console.log(`RESULT ${JSON.stringify({ fcp_ms, cards_ms, online_ms, online: await online() })}`);
} finally {
  await browser.close();
}
