// The agent's activity, conversation and usage on the Start page (issue 34)
// in a real browser: Debian's Chromium, headless, driven by playwright-core.
// Run by `conformance/tests/ui_activity.rs`, which starts the real
// `buzz-launcher ui` with one local agent (the scripted ACP agent, the
// observer on) and passes everything in the environment:
//   START_URL, CHROMIUM, BUZZ_NPM_PREFIX, SHOT_DIR as for start-page.mjs;
//   AGENT the agent's name.
// The last line is `RESULT <json>` with `activity_seen_at_ms` (epoch ms the
// page first showed the running tool) for the test to compare with the
// agent's own log. No timing assertions: every wait is a bounded wait.
import path from 'node:path';
import { env, check, launch } from './browser.mjs';

const AGENT = env('AGENT');
const SHOT_DIR = env('SHOT_DIR');
const card = `li.agent[data-name="${AGENT}"]`;

const browser = await launch();
const figures = {};
try {
  const page = await (await browser.newContext({ viewport: { width: 1100, height: 1200 } })).newPage();
  const errors = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(env('START_URL'));
  await page.waitForSelector(`${card} .state`, { timeout: 30000 });
  await page.waitForSelector('#live:text("live")', { timeout: 30000 });

  await page.click(`${card} .start`);
  await page.waitForSelector(`${card}[data-state="online"]`, { timeout: 60000 });

  // Frames are ephemeral, and the page's watch of the relay this Start
  // just started can open after the agent said online: short turns until
  // the page has shown any activity of the agent, so the watch is open.
  // They report no tokens and no cost, so the figures below are the
  // measured turn's (a turn that reports nothing would leave the next
  // turn's cost unknown: the harness takes it as the session's cost since
  // the last report).
  let warmups = 0;
  while (!(await page.$eval(card, (c) => c.dataset.activity !== undefined))) {
    check(warmups < 5, `the page showed no activity after ${warmups} turn(s)`);
    warmups += 1;
    await page.fill(`${card} .chat-input`, `[usage:0,0,0,0][tool:1000] warm up ${warmups}`);
    await page.click(`${card} .chat-send`);
    await page.waitForSelector(`${card}[data-reply="ok"]`, { timeout: 30000 });
    await page.waitForFunction((sel) => document.querySelector(sel).dataset.activity !== undefined,
      card, { timeout: 2000 }).catch(() => {});
  }
  figures.warmup_turns = warmups;
  // The last warm-up's end reaches the page after its reply may have.
  await page.waitForSelector(`${card}[data-activity="idle"]`, { timeout: 30000 }).catch(async (e) => {
    console.error('the activity line after the warm-up:', await page.textContent(`${card} .activity`));
    throw e;
  });

  // A turn that runs a tool for 8 s: the page says so while it runs (the
  // time it took is the figure; 4 s was once too short on a loaded machine).
  await page.fill(`${card} .chat-input`, '[usage:1200,80,1300,4500][tool:8000] build it');
  await page.click(`${card} .chat-send`);
  await page.waitForFunction((sel) => {
    const p = document.querySelector(`${sel} .activity`);
    if (p && !p.hidden && p.textContent.startsWith('running')) {
      window.__seen = window.__seen || Date.now();
      return true;
    }
    return false;
  }, card, { timeout: 30000, polling: 20 }).catch(async (e) => {
    const p = await page.$(`${card} .activity`);
    console.error('the activity line at the timeout (hidden, text):', p && await p.evaluate((x) => [x.hidden, x.textContent]));
    throw e;
  });
  figures.activity_seen_at_ms = await page.evaluate(() => window.__seen);
  figures.activity_text = await page.textContent(`${card} .activity`);
  await page.screenshot({ path: path.join(SHOT_DIR, 'activity-running.png'), fullPage: true });
  await page.waitForSelector(`${card}[data-reply="ok"]`, { timeout: 30000 });

  // The conversation and the usage panel, from the relay.
  await page.click(`${card} .history summary`);
  await page.waitForSelector(`${card}[data-history="ok"]`, { timeout: 30000 });
  const said = await page.$$eval(`${card} .conversation .said-text`, (els) => els.map((e) => e.textContent));
  check(said.length === 2 * (warmups + 1), `the conversation shows ${JSON.stringify(said)}`);
  check(said.at(-2) === '[usage:1200,80,1300,4500][tool:8000] build it', `the mention: ${said.at(-2)}`);
  check(said.at(-1).startsWith('echo: '), `the reply: ${said.at(-1)}`);
  const total = await page.textContent(`${card} .usage-total`);
  check(total.includes('1 200 in') && total.includes('$0.0045'), `the usage total: ${total}`);
  const bars = await page.$$eval(`${card} .plots svg.plot-tokens rect.in`, (els) => els.length);
  check(bars === warmups + 1, `the tokens plot has ${bars} input bar(s) for ${warmups + 1} turn(s)`);
  check(await page.$(`${card} .plots svg.plot-cost path.cost`) !== null, 'the cost plot has its line');
  await page.screenshot({ path: path.join(SHOT_DIR, 'activity-history.png'), fullPage: true });

  await page.click(`${card} .stop`);
  await page.waitForSelector(`${card}[data-state="offline"]`, { timeout: 60000 });
  check(errors.length === 0, `console errors: ${errors.join(' | ')}`);
  console.log(`RESULT ${JSON.stringify(figures)}`);
} finally {
  await browser.close();
}
