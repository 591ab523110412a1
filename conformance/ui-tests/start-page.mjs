// The Start page in a real browser (issue 11 "Tests"): Debian's Chromium,
// headless, driven by playwright-core. Run by `conformance/tests/ui_browser.rs`,
// which starts the real `buzz-launcher ui`, a relay and the echo agent, and
// passes everything in the environment:
//   START_URL       the URL `buzz-launcher ui` printed (with #token=)
//   CHROMIUM        the browser binary (/usr/bin/chromium)
//   BUZZ_NPM_PREFIX where node_modules/playwright-core lives
//   SHOT_DIR        where screenshots go
//   RELAY_URL       the relay the agents use
//   AGENT_COMMAND   the ACP agent command of the local agent (an echo agent)
// Protocol on stdout/stdin for the presence figure: the script prints
// `PRESENCE_READY <agent>`, then for each `PUBLISHED <state>` line it reads it
// answers `SEEN <epoch ms>` (when the dot changed, stamped in the page); `DONE`
// ends the rounds. The last line is `RESULT <json>`.
// No timing assertions: every wait is a bounded wait for a state.
import { createInterface } from 'node:readline';
import path from 'node:path';
import { env, check, launch } from './browser.mjs';

const START_URL = env('START_URL');
const SHOT_DIR = env('SHOT_DIR');
const RELAY_URL = env('RELAY_URL');
const AGENT_COMMAND = env('AGENT_COMMAND');
const AGENT = 'echo';
const REMOTE = 'remote';

const lines = createInterface({ input: process.stdin });
const pending = [];
const waiters = [];
lines.on('line', (l) => { const w = waiters.shift(); if (w) w(l); else pending.push(l); });
const nextLine = () => new Promise((res) => { const l = pending.shift(); if (l !== undefined) res(l); else waiters.push(res); });

let step = 0;
async function shot(page, name) {
  step += 1;
  const file = path.join(SHOT_DIR, `${String(step).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.error(`screenshot ${file}`);
}

const card = (name) => `li.agent[data-name="${name}"]`;

const browser = await launch();
const figures = {};
try {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  const consoleErrors = [];
  // Script errors and CSP violations count; an API answering 4xx is part of the scenario.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  // --- first paint: navigation → agents listed -------------------------------------------
  const t0 = Date.now();
  await page.goto(START_URL);
  await page.waitForSelector(`${card('seed')} .state`, { timeout: 30000 });
  figures.ui_first_paint_ms = Date.now() - t0;
  check(!page.url().includes('token='), `the token stayed in the address bar: ${page.url()}`);
  await page.waitForSelector('#live:text("live")', { timeout: 30000 });
  await shot(page, 'list');

  // --- create a local agent in the form ---------------------------------------------------
  check(await page.locator('#f-submit').isDisabled(), 'an empty form can be submitted');
  await page.fill('#f-name', AGENT);
  await page.fill('#f-relay_url', RELAY_URL);
  await page.selectOption('#f-backend', 'local');
  await page.fill('#f-agent_command', AGENT_COMMAND);
  check(await page.locator('#f-submit').isEnabled(), 'the filled form cannot be submitted');
  await page.click('#f-submit');
  await page.waitForSelector(card(AGENT), { timeout: 30000 });
  await page.waitForSelector(`#f-result:text("Saved ${AGENT}")`, { timeout: 30000 });
  const unknown = await page.locator(`${card(AGENT)} .state`).textContent();
  check(unknown === 'unknown', `a new agent shows ${unknown}`);
  await shot(page, 'created');

  // --- Start → online ---------------------------------------------------------------------
  await page.click(`${card(AGENT)} button.start`);
  await page.waitForSelector(`${card(AGENT)}[data-state="online"]`, { timeout: 120000 });
  check((await page.locator(`${card(AGENT)} .state`).textContent()) === 'online', 'the dot has no text label');
  await page.waitForSelector(`${card(AGENT)} .progress li:text("online")`, { timeout: 30000 });
  await page.waitForSelector(`${card(AGENT)}[data-deployed="yes"]`, { timeout: 30000 });
  // One live harness per agent (spec I4): Start is disabled while it runs, Stop is not.
  await page.waitForSelector(`${card(AGENT)} button.start:disabled`, { timeout: 10000 });
  check(await page.locator(`${card(AGENT)} button.stop`).isEnabled(), 'Stop is disabled while the agent is online');
  await shot(page, 'online');

  // --- chat → the reply shows ------------------------------------------------------------
  await page.fill(`${card(AGENT)} .chat-input`, 'hello from the Start page');
  await page.click(`${card(AGENT)} .chat-send`);
  await page.waitForSelector(`${card(AGENT)}[data-reply="ok"], ${card(AGENT)}[data-reply="error"]`, { timeout: 60000 });
  const reply = await page.locator(`${card(AGENT)} .reply`).textContent();
  check(await page.getAttribute(card(AGENT), 'data-reply') === 'ok', `chat failed: ${reply}`);
  check(reply.includes('hello from the Start page'), `unexpected reply: ${reply}`);
  await shot(page, 'chat');
  // The agents list alone, for the README.
  await page.locator('section[aria-labelledby="agents-h"]').screenshot({ path: path.join(SHOT_DIR, 'agents.png') });

  // --- presence event published → dot changes (rounds driven by the Rust test) ---------
  await page.evaluate((sel) => {
    const el = document.querySelector(sel);
    window.__dot = { state: el.dataset.state, at: 0 };
    new MutationObserver(() => {
      if (el.dataset.state !== window.__dot.state) window.__dot = { state: el.dataset.state, at: Date.now() };
    }).observe(el, { attributes: true, attributeFilter: ['data-state'] });
  }, card(AGENT));
  console.log(`PRESENCE_READY ${AGENT}`);
  for (;;) {
    const l = await nextLine();
    if (l === 'DONE') break;
    const [, state] = l.split(' ');
    await page.waitForFunction((s) => window.__dot.state === s, state, { timeout: 30000 });
    const at = await page.evaluate(() => window.__dot.at);
    console.log(`SEEN ${at}`);
  }
  await page.waitForSelector(`${card(AGENT)}[data-state="online"]`, { timeout: 30000 });

  // --- Stop → offline -------------------------------------------------------------------
  await page.click(`${card(AGENT)} button.stop`);
  await page.waitForSelector(`${card(AGENT)}[data-state="offline"]`, { timeout: 240000 });
  check((await page.locator(`${card(AGENT)} .state`).textContent()) === 'offline', 'offline has no text label');
  await page.waitForSelector(`${card(AGENT)} button.start:enabled`, { timeout: 30000 });
  await shot(page, 'offline');

  // --- Stop then Start at once, 20 times: the dot follows the run (issue 30 item 8) -------
  // Each Start is clicked the moment the Stop lets it. The dot must then show
  // the new run's `online`, whatever order the page learns of the Stop's
  // `offline`, the Start's `online` and the listings they trigger: the page
  // applies a dot only from a presence revision not older than the one it
  // shows. The launcher's stop returns once the second of its `!shutdown` is
  // over (`relay_ops.rs`), so the two runs' events are usually a second
  // apart here (`restart_gaps_s`); the same-second order of two runs is the
  // launcher's `presence::supersedes`, unit-tested there. Each round's wait
  // is bounded well below the harness's 60 s republish, so a dot stuck on
  // the Stop's `offline` fails the round instead of being rescued by the
  // next heartbeat; once the Start is done (and the listing it triggers has
  // come back), the dot stays `online`. The delays are a printed figure,
  // never asserted.
  // A listing computed while the agent was offline but answered after the
  // Start's `online` event: held in the route, it reaches the page late, as a
  // slow response would. It must not move the dot back.
  {
    let releaseListing;
    const listingHeld = new Promise((res) => { releaseListing = res; });
    const listing = (u) => new URL(u).pathname === '/api/agents';
    let computed;
    const listingComputed = new Promise((res) => { computed = res; });
    await page.route(listing, async (route) => {
      if (route.request().method() !== 'GET') { await route.continue(); return; }
      const response = await route.fetch();
      computed();
      await listingHeld;
      await route.fulfill({ response });
    }, { times: 1 });
    const stale = page.evaluate(() => loadAgents());
    await listingComputed;
    await page.click(`${card(AGENT)} button.start`);
    await page.waitForSelector(`${card(AGENT)}[data-state="online"]`, { timeout: 20000 });
    await page.waitForSelector(`${card(AGENT)}[data-busy="no"]`, { timeout: 60000 });
    releaseListing();
    await stale;
    await page.unroute(listing);
    const after = await page.getAttribute(card(AGENT), 'data-state');
    check(after === 'online', `a listing computed before the Start moved the dot back to ${after}`);
    await page.click(`${card(AGENT)} button.stop`);
    await page.waitForSelector(`${card(AGENT)}[data-state="offline"]`, { timeout: 60000 });
    await page.waitForSelector(`${card(AGENT)} button.start:enabled`, { timeout: 30000 });
  }
  const restarts = [];
  let sameSecond = 0;
  const gaps = [];
  for (let round = 0; round < 20; round += 1) {
    const offlineSeen = Number(await page.getAttribute(card(AGENT), 'data-seen')) || 0;
    const t = Date.now();
    await page.click(`${card(AGENT)} button.start`);
    await page.waitForSelector(`${card(AGENT)}[data-state="online"]`, { timeout: 20000 })
      .catch((e) => { throw new Error(`round ${round}: the dot is not online 20 s after Start (${e.message})`); });
    restarts.push(Date.now() - t);
    await page.waitForSelector(`${card(AGENT)}[data-busy="no"]`, { timeout: 60000 });
    const moved = await page.waitForFunction((sel) => document.querySelector(sel).dataset.state !== 'online',
      card(AGENT), { timeout: 1500 }).then(() => true, () => false);
    const now = await page.getAttribute(card(AGENT), 'data-state');
    check(!moved, `round ${round}: after the Start was done the dot moved back to ${now}`);
    const onlineSeen = Number(await page.getAttribute(card(AGENT), 'data-seen')) || 0;
    gaps.push(onlineSeen - offlineSeen);
    if (onlineSeen === offlineSeen) sameSecond += 1;
    await page.click(`${card(AGENT)} button.stop`);
    await page.waitForSelector(`${card(AGENT)}[data-state="offline"]`, { timeout: 60000 });
    await page.waitForSelector(`${card(AGENT)} button.start:enabled`, { timeout: 30000 });
  }
  figures.restart_to_online_ms = restarts;
  figures.restart_same_second_rounds = sameSecond;
  figures.restart_gaps_s = gaps;

  // --- the edit form stays read-only until the record has filled it ----------------------
  let release;
  const held = new Promise((res) => { release = res; });
  const recordUrl = (u) => new URL(u).pathname === `/api/agents/${AGENT}`;
  await page.route(recordUrl, async (route) => {
    if (route.request().method() === 'GET') await held;
    await route.continue();
  });
  await page.click(`${card(AGENT)} button.edit`);
  await page.waitForSelector('#agent-form[data-loading="yes"]', { timeout: 10000 });
  check(await page.locator('#f-model').isDisabled(), 'the edit form is editable before the record loaded');
  check(await page.locator('#f-submit').isDisabled(), 'the edit form can be saved before the record loaded');
  release();
  await page.waitForSelector('#agent-form[data-loading="no"]', { timeout: 10000 });
  check(await page.locator('#f-model').isEnabled(), 'the edit form stays read-only once the record is in');
  check(await page.inputValue('#f-agent_command') === AGENT_COMMAND, 'the record did not fill the form');
  await page.unroute(recordUrl);
  await page.click('#f-cancel');
  await page.waitForSelector('#form-h:text("Create an agent")', { timeout: 10000 });

  // --- a provider backend: the schema form --------------------------------------------------
  await page.fill('#f-name', REMOTE);
  await page.fill('#f-relay_url', RELAY_URL);
  await page.selectOption('#f-backend', 'provider:schema');
  await page.waitForSelector('#cfg-replicas', { timeout: 30000 });
  check(await page.inputValue('#cfg-replicas') === '1', 'replicas is not prefilled with its default');
  check(await page.inputValue('#cfg-timeout_seconds') === '30', 'timeout_seconds is not prefilled');
  check(await page.inputValue('#cfg-namespace') === 'buzz-agents', 'namespace is not prefilled');
  check(!(await page.isChecked('#cfg-debug')), 'debug is not prefilled false');
  check(await page.getAttribute('#cfg-replicas', 'type') === 'number', 'replicas is not a number field');
  check(await page.getAttribute('#cfg-debug', 'type') === 'checkbox', 'debug is not a checkbox');
  // Provider text is text: the description's markup is shown, never parsed.
  const desc = await page.locator('#desc-cfg-ssh_key_path').textContent();
  check(desc.includes('<b>not bold</b>'), `description not shown as text: ${desc}`);
  check(await page.locator('#config b, #config img').count() === 0, 'provider text was parsed as HTML');
  await shot(page, 'schema-form');

  // A required number cleared: the form refuses "" (submit gated, error by the field).
  await page.fill('#cfg-replicas', '');
  await page.waitForSelector('#err-cfg-replicas:text("replicas is required")', { timeout: 10000 });
  check(await page.locator('#f-submit').isDisabled(), 'a cleared required number can be submitted');
  await shot(page, 'required-number');

  // I2: a secret-looking field name is refused by the server, the error sits by the field.
  await page.fill('#cfg-replicas', '2');
  await page.fill('#cfg-ssh_key_path', '/home/me/.ssh/id_ed25519');
  await page.click('#f-submit');
  await page.waitForSelector('#err-cfg-ssh_key_path:text("looks like it holds a secret")', { timeout: 30000 });
  await shot(page, 'i2-error');

  // An optional number cleared is omitted, never sent as "".
  await page.fill('#cfg-ssh_key_path', '');
  await page.fill('#cfg-timeout_seconds', '');
  const [req] = await Promise.all([
    page.waitForRequest((r) => r.url().endsWith('/api/agents') && r.method() === 'POST', { timeout: 30000 }),
    page.click('#f-submit'),
  ]);
  const sent = req.postDataJSON();
  const canon = (o) => JSON.stringify(Object.keys(o).sort().map((k) => [k, o[k]]));
  check(canon(sent.config) === canon({ replicas: 2, debug: false, namespace: 'buzz-agents' }),
    `config sent: ${JSON.stringify(sent.config)}`);
  await page.waitForSelector(card(REMOTE), { timeout: 30000 });

  // Start the provider agent: progress shows the provider's status lines; then it is deployed.
  await page.click(`${card(REMOTE)} button.start`);
  await page.waitForSelector(`${card(REMOTE)}[data-deployed="yes"]`, { timeout: 60000 });
  await page.waitForSelector(`${card(REMOTE)} .progress li:text("waiting for the container to start")`, { timeout: 30000 });
  await shot(page, 'deployed');

  // Delete a deployed agent: the force confirmation.
  await page.click(`${card(REMOTE)} button.delete`);
  await page.waitForSelector(`${card(REMOTE)} .confirm-text:text("is deployed")`, { timeout: 10000 });
  check(await page.evaluate(() => document.activeElement.classList.contains('confirm-no')), 'focus did not move to Cancel');
  await shot(page, 'delete-confirm');
  await page.click(`${card(REMOTE)} .confirm-yes`);
  await page.waitForSelector(card(REMOTE), { state: 'detached', timeout: 30000 });

  // An Undeploy of an agent with a workspace volume asks first; the volume
  // is kept only when the box is checked, and the outcome says so.
  const VOL = 'vol';
  await page.click(`${card(VOL)} button.start`);
  await page.waitForSelector(`${card(VOL)}[data-deployed="yes"]`, { timeout: 60000 });
  await page.click(`${card(VOL)} button.undeploy`);
  await page.waitForSelector(`${card(VOL)} .keep-workspace:not([hidden])`, { timeout: 10000 });
  check(!(await page.isChecked(`${card(VOL)} .keep-workspace-box`)), 'keeping the workspace is checked by default');
  const asked = await page.locator(`${card(VOL)} .confirm-text`).textContent();
  check(asked.includes('workspace volume'), `the Undeploy confirmation: ${asked}`);
  await page.check(`${card(VOL)} .keep-workspace-box`);
  await shot(page, 'undeploy-keep-workspace');
  await page.click(`${card(VOL)} .confirm-yes`);
  await page.waitForSelector(`${card(VOL)} .progress li:text("kept the workspace volume buzz-workspace-fake")`, { timeout: 30000 });
  await page.waitForSelector(`${card(VOL)}[data-deployed="no"]`, { timeout: 30000 });

  // --- provider diagnostics: approve the digest ---------------------------------------------
  const prov = 'li.provider[data-provider="schema"]';
  await page.waitForSelector(`${prov} p:text("sha256 ")`, { timeout: 10000 });
  await page.click(`${prov} button:text("Approve")`);
  await page.waitForSelector(`${prov} button:text("Approved")`, { timeout: 30000 });
  check(await page.locator(`${prov} button`).isDisabled(), 'an approved digest can be approved again');

  // --- keyboard and narrow width --------------------------------------------------------------
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  let reached = false;
  for (let i = 0; i < 60 && !reached; i += 1) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate((sel) => document.activeElement && document.activeElement.matches(sel), `${card(AGENT)} button.start`);
  }
  check(reached, 'Start is not reachable by keyboard');
  const outline = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  check(outline !== 'none', 'the focused button shows no focus ring');
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((el) => !el.closest('template') && el.offsetParent !== null)
    .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !(el.textContent || '').trim())
    .map((el) => el.id || el.className));
  check(unlabelled.length === 0, `unlabelled controls: ${unlabelled.join(', ')}`);
  await page.setViewportSize({ width: 360, height: 800 });
  await shot(page, 'narrow');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  const wide = await page.evaluate(() => [...document.querySelectorAll('body *')]
    .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
    .slice(0, 5).map((el) => `${el.tagName}.${el.className}#${el.id}`));
  check(overflow <= 1, `the page scrolls sideways at 360 px (${overflow} px): ${wide.join(', ')}`);

  check(consoleErrors.length === 0, `console errors: ${consoleErrors.join(' | ')}`);
  console.log(`RESULT ${JSON.stringify(figures)}`);
} finally {
  await browser.close();
  lines.close();
}
