// The Start page with a long history (issue 34 "Figures": time to first
// paint with 1 000 turns of history), in Debian's Chromium, headless.
// Run by `bench history` (`conformance/src/bench/history.rs`), which passes
// START_URL, CHROMIUM, BUZZ_NPM_PREFIX, AGENT and TURNS in the environment.
// The last line is `RESULT <json>`:
//   fcp_ms      the page's first contentful paint (the browser's own paint
//               timing), the history not loaded (it loads when its panel opens);
//   cards_ms    navigation start to the agent's card drawn;
//   history_ms  the click that opens the panel to its newest turns, the
//               usage total and the plots drawn;
//   said        the mentions and replies it shows first;
//   older_ms    the clicks on "Show older" back to the first turn, in all;
//   all         the messages shown then;
//   api         the panel's two API reads (conversation, usage), ms each.
// Figures only: every wait is bounded, nothing is asserted on time.
import { env, check, launch } from './browser.mjs';

const AGENT = env('AGENT');
const TURNS = Number(env('TURNS'));
const card = `li.agent[data-name="${AGENT}"]`;

const browser = await launch();
try {
  const page = await (await browser.newContext({ viewport: { width: 1100, height: 1200 } })).newPage();
  await page.goto(env('START_URL'));
  await page.waitForSelector(`${card} .state`, { timeout: 30000 });
  const cards_ms = await page.evaluate(() => performance.now());
  const fcp_ms = await page.evaluate(() => {
    const p = performance.getEntriesByName('first-contentful-paint')[0];
    return p ? p.startTime : null;
  });
  const t0 = await page.evaluate(() => performance.now());
  await page.click(`${card} .history summary`);
  await page.waitForSelector(`${card}[data-history="ok"]`, { timeout: 60000 });
  // One frame after the DOM holds it: drawn, not only built.
  const t1 = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r(performance.now()))));
  const said = await page.$$eval(`${card} .conversation .said-text`, (els) => els.length);
  check(said >= 100 && said < 2 * TURNS, `the panel shows the newest turns first: ${said} messages`);
  // Then every older page, a click each, to the first turn.
  const t2 = await page.evaluate(() => performance.now());
  while (await page.$(`${card} .conversation li.older button`)) await page.click(`${card} .conversation li.older button`);
  const t3 = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r(performance.now()))));
  const all = await page.$$eval(`${card} .conversation .said-text`, (els) => els.length);
  check(all >= 2 * TURNS, `every turn shown at last: ${all} messages of ${2 * TURNS}`);
  const bars = await page.$$eval(`${card} .plots svg.plot-tokens rect.in`, (els) => els.length);
  check(bars === TURNS, `the tokens plot has ${bars} bars of ${TURNS}`);
  // Where the panel's time went: its two API reads, as the browser timed them.
  const api = await page.evaluate(() => Object.fromEntries(performance.getEntriesByType('resource')
    .filter((e) => /\/(conversation|usage)$/.test(new URL(e.name).pathname))
    .map((e) => [new URL(e.name).pathname.split('/').pop(), Math.round(e.duration)])));
  console.log(`RESULT ${JSON.stringify({ fcp_ms, cards_ms, history_ms: t1 - t0, said, all, older_ms: t3 - t2, bars, api })}`);
} finally {
  await browser.close();
}
