// The Start page. Plain JS, no build step. Every piece of server or provider
// text is set with textContent, never parsed as HTML.
'use strict';

const TOKEN_KEY = 'buzz-launcher-token';
const $ = (id) => document.getElementById(id);

// The token arrives once in the URL fragment (#token=…), is kept in
// sessionStorage and the fragment is removed from the address bar.
function takeToken() {
  const m = /(?:^#|&)token=([0-9a-f]{64})(?:&|$)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, m[1]);
    history.replaceState(null, '', location.pathname);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}
const token = takeToken();

function notice(text) {
  const n = $('notice');
  n.textContent = text;
  n.hidden = !text;
}

async function api(method, path, body) {
  const opts = { method, headers: { Authorization: 'Bearer ' + token } };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  let data = {};
  try { data = await r.json(); } catch (_) { data = {}; }
  if (r.status === 401) notice('This page has no valid token: open the URL printed by `buzz-launcher ui`.');
  return { status: r.status, ok: r.ok, data };
}

// ---- agents -------------------------------------------------------------------------------

const cards = new Map();
let agentsByName = new Map();

function seenText(at) {
  if (!at) return 'never seen';
  const s = Math.max(0, Math.round(Date.now() / 1000 - at));
  return s < 2 ? 'just now' : `${s} s ago`;
}

// What a dozing agent's card says: it answers by itself, and until when.
function dozeText(sleepsAt) {
  const base = 'answers a mention by itself';
  if (!sleepsAt) return `${base}; no inactivity bound`;
  const at = new Date(sleepsAt * 1000);
  const same = at.toDateString() === new Date().toDateString();
  const when = same ? at.toLocaleTimeString([], {hour: '2-digit', minute: '2-digit'}) : at.toLocaleString();
  return `${base}; sleeps at ${when}`;
}

// The dot follows the launcher's presence snapshots, each with a revision
// counted up per change (`ui/live.rs`). A card applies a dot only from a
// revision not older than the one it shows: a listing computed before a
// change but answered after that change's event never moves the dot back,
// whatever order the two arrive in (issue 30 item 8). A new event stream
// (`hello`) may come from a restarted server that counts from 0 again, so
// it resets every card's revision.
function setPresence(card, state, lastSeen, rev, sleepsAt) {
  if (rev !== undefined) {
    if (rev < Number(card.dataset.rev || 0)) return;
    card.dataset.rev = String(rev);
  }
  card.dataset.state = state;
  // A harness says `away` while it dozes (issue 50): no agent process, and
  // it answers the next mention by itself until its inactivity bound ends
  // it at `sleeps_at` (a clock time, so the text never goes stale).
  const dozing = state === 'away';
  card.querySelector('.state').textContent = dozing ? 'dozing' : state;
  card.querySelector('.dot').title = dozing ? dozeText(sleepsAt) : state;
  card.querySelector('.doze').textContent = dozing ? dozeText(sleepsAt) : '';
  card.querySelector('.doze-row').hidden = !dozing;
  if (lastSeen !== undefined) card.dataset.seen = lastSeen || '';
  card.querySelector('.seen').textContent = seenText(Number(card.dataset.seen) || 0);
  syncButtons(card);
}

// One live harness per agent (spec I4): Start is disabled while the agent
// is online, away, running or starting; Stop is enabled unless an
// operation is in flight. The server refuses a second start either way.
function syncButtons(card) {
  const busy = card.dataset.busy === 'yes';
  const live = card.dataset.state === 'online' || card.dataset.state === 'away' || card.dataset.running === 'yes';
  card.querySelector('.start').disabled = busy || live;
  card.querySelector('.stop').disabled = busy;
  card.querySelector('.undeploy').disabled = busy;
  card.querySelector('.delete').disabled = busy;
}

function makeCard(name) {
  const card = $('agent-tpl').content.firstElementChild.cloneNode(true);
  card.dataset.name = name;
  const q = (s) => card.querySelector(s);
  q('.start').setAttribute('aria-label', `Start ${name}`);
  q('.stop').setAttribute('aria-label', `Stop ${name}`);
  q('.edit').setAttribute('aria-label', `Edit ${name}`);
  q('.delete').setAttribute('aria-label', `Delete ${name}`);
  q('.undeploy').setAttribute('aria-label', `Undeploy ${name}`);
  const inputId = `chat-${name}`;
  q('.chat-input').id = inputId;
  q('.chat-label').htmlFor = inputId;
  q('.chat-label').textContent = `Message to ${name}`;
  q('.chat-send').setAttribute('aria-label', `Send message to ${name}`);
  q('.start').addEventListener('click', () => start(name));
  q('.stop').addEventListener('click', () => stop(name));
  q('.edit').addEventListener('click', () => editAgent(name));
  q('.delete').addEventListener('click', () => askDelete(name));
  q('.undeploy').addEventListener('click', () => askUndeploy(name));
  q('.confirm-no').addEventListener('click', () => { q('.confirm').hidden = true; q(`.${card.dataset.confirmFor || 'delete'}`).focus(); });
  q('.confirm-yes').addEventListener('click', () => (card.dataset.confirmFor === 'undeploy' ? undeploy(name) : doDelete(name)));
  q('.chat').addEventListener('submit', (e) => { e.preventDefault(); chat(name); });
  q('.history').addEventListener('toggle', () => { if (q('.history').open) loadHistory(name); });
  return card;
}

// ---- conversation, usage and activity (issue 34) ------------------------------------------

function whenText(at) {
  return new Date(at * 1000).toISOString().replace('T', ' ').slice(0, 19);
}

function saidItem(m) {
  const li = document.createElement('li');
  li.className = m.agent ? 'said agent' : 'said';
  const head = document.createElement('span');
  head.className = 'muted';
  head.textContent = `${whenText(m.at)}  ${m.who}: `;
  const text = document.createElement('span');
  text.className = 'said-text';
  text.textContent = m.text;
  li.append(head, text);
  return li;
}

// The newest turns first drawn, a page at a time: a long-lived agent's
// history does not hold the panel up (issue 34: 1 000 turns).
const TURNS_PAGE = 100;

function turnItem(t) {
  const li = t.mention ? saidItem(t.mention) : document.createElement('li');
  if (t.replies.length) {
    const replies = document.createElement('ol');
    replies.className = 'replies';
    for (const r of t.replies) replies.append(saidItem(r));
    li.append(replies);
  }
  return li;
}

// Draws turns[from - TURNS_PAGE .. from) at the top of `list`, under a
// button for the older ones when there are any.
function showTurns(list, turns, from) {
  const start = Math.max(0, from - TURNS_PAGE);
  const page = document.createDocumentFragment();
  if (start > 0) {
    const more = document.createElement('li');
    more.className = 'older';
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = `Show ${Math.min(TURNS_PAGE, start)} older turn(s) of ${start}`;
    b.addEventListener('click', () => { more.remove(); showTurns(list, turns, start); });
    more.append(b);
    page.append(more);
  }
  for (const t of turns.slice(start, from)) page.append(turnItem(t));
  list.prepend(page);
}

async function loadHistory(name) {
  const card = cards.get(name);
  if (!card) return;
  const q = (s) => card.querySelector(s);
  q('.history-status').textContent = 'reading the relay…';
  const path = `/api/agents/${encodeURIComponent(name)}`;
  const [conv, usage] = await Promise.all([api('GET', `${path}/conversation`), api('GET', `${path}/usage`)]);
  const list = q('.conversation');
  list.replaceChildren();
  if (conv.ok) showTurns(list, conv.data.turns, conv.data.turns.length);
  const plots = q('.plots');
  plots.replaceChildren();
  if (usage.ok) {
    q('.usage-total').textContent = usage.data.total || 'No usage reported yet.';
    q('.usage-hours').textContent = usage.data.hours || '';
    q('.measured-line').textContent = usage.data.measured || (usage.data.measured_error ? `Collector: ${usage.data.measured_error}` : '');
    for (const key of ['tokens', 'cost', 'cpu', 'memory']) {
      if (!usage.data.plots[key]) continue;
      const doc = new DOMParser().parseFromString(usage.data.plots[key], 'image/svg+xml');
      const svg = doc.documentElement;
      if (svg && svg.nodeName === 'svg') { svg.classList.add('plot', `plot-${key}`); plots.append(document.importNode(svg, true)); }
    }
  }
  const err = !conv.ok ? conv.data.error : (!usage.ok ? usage.data.error : '');
  q('.history-status').textContent = err ? `Error: ${err}` : `${conv.data.turns.length} turn(s)`;
  card.dataset.history = err ? 'error' : 'ok';
}

function setActivity(name, text, busy) {
  const card = cards.get(name);
  if (!card) return;
  const p = card.querySelector('.activity');
  p.hidden = false;
  p.textContent = text;
  card.dataset.activity = busy ? 'busy' : 'idle';
}

function renderAgent(card, a) {
  const q = (s) => card.querySelector(s);
  q('.name').textContent = a.name;
  q('.display').textContent = a.display_name || '';
  q('.backend').textContent = a.backend;
  q('.deployed').textContent = a.deployed ? (a.agent_id ? `deployed (${a.agent_id})` : 'deployed') : 'not deployed';
  card.dataset.deployed = a.deployed ? 'yes' : 'no';
  card.dataset.running = a.running ? 'yes' : 'no';
  // Undeploy is a provider operation (it also clears a Start that never confirmed).
  q('.undeploy').hidden = !a.backend.startsWith('provider:');
  // Sleeping or stopped, and whether anything wakes it (issue 33).
  q('.silent-row').hidden = !a.silent;
  q('.silent').textContent = a.silent || '';
  q('.rest-row').hidden = !a.rest_note;
  q('.rest').textContent = a.rest_note || '';
  q('.note').hidden = !a.restart_note;
  // Two desktops edited it at once (issue 52 item 4): neither version applied.
  q('.conflict').hidden = !a.conflict;
  q('.conflict').textContent = a.conflict
    ? `Edited on two desktops at once (${a.conflict.differs.join(', ')}): neither version is applied; pick one with ${a.conflict.resolve}`
    : '';
  q('.last-error').hidden = !a.last_error;
  q('.last-error').textContent = a.last_error ? `Last error: ${a.last_error}` : '';
  setBusy(card, a.busy);
  setPresence(card, a.presence, a.last_seen, a.presence_rev, a.sleeps_at);
}

function setBusy(card, busy) {
  card.dataset.busy = busy ? 'yes' : 'no';
  syncButtons(card);
}

async function loadAgents() {
  const r = await api('GET', '/api/agents');
  if (!r.ok) { notice(r.data.error || 'cannot list agents'); return; }
  const list = $('agents');
  const seen = new Set();
  agentsByName = new Map();
  for (const a of r.data.agents) {
    seen.add(a.name);
    agentsByName.set(a.name, a);
    let card = cards.get(a.name);
    if (!card) {
      card = makeCard(a.name);
      cards.set(a.name, card);
      list.appendChild(card);
    }
    renderAgent(card, a);
  }
  for (const [name, card] of cards) {
    if (!seen.has(name)) { card.remove(); cards.delete(name); }
  }
  $('agents-empty').hidden = r.data.agents.length > 0;
  list.setAttribute('aria-busy', 'false');
  document.body.dataset.agentsLoaded = 'yes';
}

function progressLine(name, line) {
  const card = cards.get(name);
  if (!card) return;
  const li = document.createElement('li');
  li.textContent = line;
  const ol = card.querySelector('.progress');
  ol.appendChild(li);
  while (ol.children.length > 50) ol.removeChild(ol.firstChild);
}

async function start(name) {
  const card = cards.get(name);
  card.querySelector('.progress').replaceChildren();
  setBusy(card, true);
  const r = await api('POST', `/api/agents/${encodeURIComponent(name)}/start`);
  if (!r.ok) { progressLine(name, r.data.error || 'start refused'); setBusy(card, false); return; }
  // Nothing was spawned: the agent runs already, or its start is in flight.
  if (r.data.already_running || r.data.already_starting) {
    progressLine(name, r.data.message);
    if (r.data.already_running) setBusy(card, false);
    reloadSoon();
  }
}

async function stop(name) {
  const card = cards.get(name);
  card.querySelector('.progress').replaceChildren();
  setBusy(card, true);
  const r = await api('POST', `/api/agents/${encodeURIComponent(name)}/stop`);
  if (!r.ok) progressLine(name, r.data.error || 'stop failed');
  setBusy(card, false);
}

// The confirmation names what a Delete removes: the server plans it (for a
// deployed provider agent, `info` says whether the provider offers undeploy).
async function askDelete(name) {
  const card = cards.get(name);
  const a = agentsByName.get(name) || {};
  const q = (s) => card.querySelector(s);
  const r = await api('GET', `/api/agents/${encodeURIComponent(name)}/delete-plan`);
  const plan = r.ok ? r.data : { confirm: r.data.error || `Delete ${name}?`, needs_force: !!a.deployed, plan: 'orphan' };
  card.dataset.deleteForce = plan.needs_force ? 'yes' : 'no';
  showConfirm(card, 'delete', plan.confirm,
    plan.plan === 'undeploy' ? 'Undeploy and delete' : (plan.needs_force ? 'Delete anyway' : 'Delete'), !!plan.workspace);
}

// One confirmation per card, for a Delete or an Undeploy; the checkbox
// appears when the teardown would remove a workspace volume, unchecked:
// the default removes it, as the CLI's does without --keep-workspace.
function showConfirm(card, what, text, yes, workspace) {
  const q = (s) => card.querySelector(s);
  card.dataset.confirmFor = what;
  q('.confirm-text').textContent = text;
  q('.confirm-yes').textContent = yes;
  q('.keep-workspace').hidden = !workspace;
  q('.keep-workspace-box').checked = false;
  q('.confirm').hidden = false;
  q('.confirm-no').focus();
}

// `&keep_workspace=true` (or `?…`) when the confirmation's box is checked.
function keepQuery(card, sep) {
  const box = card && card.querySelector('.keep-workspace-box');
  return box && !card.querySelector('.keep-workspace').hidden && box.checked ? `${sep}keep_workspace=true` : '';
}

// An Undeploy of an agent that may have a workspace volume (its config
// names one, or a deploy made one that no undeploy removed) asks first; any
// other runs at once, as it removes nothing a Start does not recreate.
function askUndeploy(name) {
  const card = cards.get(name);
  const a = agentsByName.get(name) || {};
  if (!a.workspace_volume) { undeploy(name); return; }
  showConfirm(card, 'undeploy',
    `Undeploy ${name}: removes its pod and Secrets, and its workspace volume with the agent's files and conversations unless you keep it. The record stays.`,
    'Undeploy', true);
}

async function doDelete(name) {
  const card = cards.get(name);
  const force = card && card.dataset.deleteForce === 'yes' ? '?force=true' : '';
  const keep = keepQuery(card, force ? '&' : '?');
  if (card) { card.querySelector('.confirm').hidden = true; setBusy(card, true); }
  const r = await api('DELETE', `/api/agents/${encodeURIComponent(name)}${force}${keep}`);
  if (card) setBusy(card, false);
  if (!r.ok && card) progressLine(name, r.data.error || 'delete failed');
  if (r.ok && r.data.warning) notice(r.data.warning);
  if (r.ok && editing === name) resetForm();
  await loadAgents();
}

async function undeploy(name) {
  const card = cards.get(name);
  const keep = keepQuery(card, '?');
  card.querySelector('.confirm').hidden = true;
  card.querySelector('.progress').replaceChildren();
  setBusy(card, true);
  const r = await api('POST', `/api/agents/${encodeURIComponent(name)}/undeploy${keep}`);
  if (!r.ok) progressLine(name, r.data.error || 'undeploy failed');
  setBusy(card, false);
  reloadSoon();
}

async function chat(name) {
  const card = cards.get(name);
  const input = card.querySelector('.chat-input');
  const out = card.querySelector('.reply');
  const text = input.value;
  if (!text.trim()) { out.textContent = 'Type a message first.'; return; }
  out.textContent = 'waiting for the reply…';
  card.dataset.reply = 'waiting';
  const r = await api('POST', `/api/agents/${encodeURIComponent(name)}/chat`, { text });
  out.textContent = r.ok ? r.data.reply : `Error: ${r.data.error || 'chat failed'}`;
  card.dataset.reply = r.ok ? 'ok' : 'error';
  if (card.querySelector('.history').open) loadHistory(name);
}

// ---- the form -----------------------------------------------------------------------------

let editing = null;   // the agent name being edited, or null for create
let schemaFields = []; // the rendered config_schema fields

const FORM_FIELDS = ['name', 'relay_url', 'backend', 'display_name', 'agent_preset', 'agent_command', 'agent_args',
  'model', 'permission_mode', 'permission_policy', 'permission_policy_others', 'provider', 'system_prompt'];

// ---- agent presets (the CLI's --agent; the table comes from the server) -------------------

let presets = new Map();  // name → preset
let apiKeySet = false;    // the edited agent has its preset's key stored

async function loadPresets() {
  const r = await api('GET', '/api/presets');
  if (!r.ok) return;
  const sel = $('f-agent_preset');
  const custom = sel.querySelector(`option[value="${r.data.custom}"]`);
  presets = new Map();
  for (const p of r.data.presets) {
    presets.set(p.name, p);
    if (!sel.querySelector(`option[value="${p.name}"]`)) {
      const o = document.createElement('option');
      o.value = p.name;
      o.textContent = `${p.name} (${p.command})`;
      sel.insertBefore(o, custom);
    }
  }
  for (const pol of [$('f-permission_policy'), $('f-permission_policy_others')]) {
    for (const p of r.data.permission_policies) {
      if (!pol.querySelector(`option[value="${p}"]`)) {
        const o = document.createElement('option');
        o.value = p;
        o.textContent = p;
        pol.appendChild(o);
      }
    }
  }
  syncPreset();
}

// A preset fixes the command (shown, read-only) and says which API key it reads.
function syncPreset() {
  const p = presets.get($('f-agent_preset').value);
  const cmd = $('f-agent_command');
  cmd.readOnly = !!p;
  if (p) cmd.value = p.command;
  const keyEnv = p && p.key_env.length ? p.key_env[0] : null;
  $('api-key-field').hidden = !keyEnv;
  $('f-api_key-label').textContent = keyEnv ? `API key (${keyEnv})` : 'API key';
  $('f-api_key').placeholder = keyEnv && apiKeySet ? 'stored; leave empty to keep it' : '';
  const local = $('f-backend').value === 'local';
  $('preset-note').textContent = p && local && p.missing_locally ? p.missing_locally : '';
}

function clearErrors() {
  for (const el of document.querySelectorAll('#agent-form .error')) el.textContent = '';
  $('f-result').textContent = '';
}

function showErrors(fields) {
  let first = null;
  for (const [key, msg] of Object.entries(fields || {})) {
    let el = $(`err-${key}`);
    if (!el && key.startsWith('config.')) el = $(`err-cfg-${key.slice(7)}`) || $('err-config');
    if (!el) el = $('err-_form');
    el.textContent = msg;
    const input = el.id.startsWith('err-cfg-') ? $(`cfg-${el.id.slice(8)}`) : $(`f-${key}`);
    if (input) input.setAttribute('aria-invalid', 'true');
    if (!first && input) first = input;
  }
  if (first) first.focus();
}

function configInput(f, value) {
  const wrap = document.createElement('div');
  wrap.className = f.type === 'boolean' ? 'field check' : 'field';
  const id = `cfg-${f.name}`;
  const label = document.createElement('label');
  label.htmlFor = id;
  label.textContent = (f.label || f.name) + (f.required ? ' (required)' : '');
  const input = document.createElement('input');
  input.id = id;
  input.dataset.field = f.name;
  input.dataset.type = f.type;
  if (f.type === 'boolean') {
    input.type = 'checkbox';
    input.checked = value === true;
  } else {
    input.type = f.type === 'string' ? 'text' : 'number';
    if (f.type === 'integer') input.step = '1';
    if (f.type === 'number') input.step = 'any';
    input.value = value === undefined || value === null ? '' : String(value);
    input.autocomplete = 'off';
  }
  if (f.required) input.required = true;
  const err = document.createElement('span');
  err.className = 'error';
  err.id = `err-cfg-${f.name}`;
  err.setAttribute('aria-live', 'polite');
  const describedBy = [err.id];
  if (f.description) {
    const d = document.createElement('span');
    d.className = 'desc';
    d.id = `desc-cfg-${f.name}`;
    d.textContent = f.description;
    describedBy.push(d.id);
    input.setAttribute('aria-describedby', describedBy.join(' '));
    input.addEventListener('input', gate);
    input.addEventListener('change', gate);
    if (f.type === 'boolean') { wrap.append(input, label, d, err); } else { wrap.append(label, input, d, err); }
    return wrap;
  }
  input.setAttribute('aria-describedby', describedBy.join(' '));
  input.addEventListener('input', gate);
  input.addEventListener('change', gate);
  if (f.type === 'boolean') { wrap.append(input, label, err); } else { wrap.append(label, input, err); }
  return wrap;
}

// Reads the config section by the schema rules: a cleared field is omitted
// (never sent as ""), numbers are numbers, booleans are booleans.
function readConfig() {
  const config = {};
  const errors = {};
  for (const f of schemaFields) {
    const input = $(`cfg-${f.name}`);
    if (!input) continue;
    if (f.type === 'boolean') { config[f.name] = input.checked; continue; }
    if (f.type === 'integer' || f.type === 'number') {
      if (input.validity.badInput) { errors[f.name] = `${f.name} must be a number`; continue; }
      if (input.value.trim() === '') {
        if (f.required) errors[f.name] = `${f.name} is required`;
        continue;
      }
      const n = Number(input.value);
      if (!Number.isFinite(n) || (f.type === 'integer' && !Number.isInteger(n))) {
        errors[f.name] = `${f.name} must be ${f.type === 'integer' ? 'a whole number' : 'a number'}`;
        continue;
      }
      config[f.name] = n;
      continue;
    }
    const v = input.value.trim();
    if (v === '') { if (f.required) errors[f.name] = `${f.name} is required`; continue; }
    config[f.name] = v;
  }
  return { config, errors };
}

// Required fields gate the submit button.
function gate() {
  const missing = [];
  for (const id of ['f-name']) if (!$(id).value.trim()) missing.push($(id).labels[0].textContent);
  const { errors } = readConfig();
  for (const f of schemaFields) {
    const el = $(`err-cfg-${f.name}`);
    if (el) el.textContent = errors[f.name] || '';
    const input = $(`cfg-${f.name}`);
    if (input) input.setAttribute('aria-invalid', errors[f.name] ? 'true' : 'false');
  }
  const blocked = missing.length > 0 || Object.keys(errors).length > 0;
  $('f-submit').disabled = blocked || $('agent-form').dataset.loading === 'yes';
  $('f-gate').textContent = missing.length ? `Needed: ${missing.join(', ')}` : (Object.keys(errors).length ? 'Fix the marked fields' : '');
}

async function loadSchema(backend, values) {
  schemaFields = [];
  const box = $('config-fields');
  box.replaceChildren();
  const fs = $('config');
  const about = $('config-about');
  about.textContent = '';
  if (!backend.startsWith('provider:')) { fs.hidden = true; gate(); return; }
  fs.hidden = false;
  const id = backend.slice('provider:'.length);
  about.textContent = 'Asking the provider for its configuration…';
  const agent = editing ? `?agent=${encodeURIComponent(editing)}` : '';
  const r = await api('GET', `/api/providers/${encodeURIComponent(id)}/schema${agent}`);
  if (!r.ok) {
    about.textContent = r.data.error || 'the provider did not answer';
    gate();
    return;
  }
  about.textContent = `${r.data.name || id} ${r.data.version || ''} — ${r.data.description || ''} (sha256 ${r.data.sha256})`;
  schemaFields = r.data.fields;
  for (const f of schemaFields) {
    const v = values && Object.prototype.hasOwnProperty.call(values, f.name) ? values[f.name] : (editing ? undefined : f.default);
    box.appendChild(configInput(f, v));
  }
  gate();
}

function resetForm() {
  editing = null;
  setFormLoading(false);
  $('agent-form').reset();
  $('f-name').disabled = false;
  $('form-h').textContent = 'Create an agent';
  $('f-submit').textContent = 'Create agent';
  $('f-cancel').hidden = true;
  $('env-names').hidden = true;
  apiKeySet = false;
  syncPreset();
  clearErrors();
  loadSchema($('f-backend').value, null);
}

function ensureBackendOption(value) {
  const sel = $('f-backend');
  if (![...sel.options].some((o) => o.value === value)) {
    const o = document.createElement('option');
    o.value = value;
    o.textContent = value;
    sel.appendChild(o);
  }
}

// The edit form is read-only until the record has filled it: typing into
// it earlier would be overwritten by the record when it arrives.
function setFormLoading(loading) {
  const form = $('agent-form');
  form.setAttribute('aria-busy', loading ? 'true' : 'false');
  form.dataset.loading = loading ? 'yes' : 'no';
  for (const el of form.elements) el.disabled = loading;
  $('f-cancel').disabled = false;
  if (!loading) {
    $('f-name').disabled = editing !== null;
    gate();
  }
}

async function editAgent(name) {
  editing = name;
  $('form-h').textContent = `Edit ${name}`;
  $('f-submit').textContent = 'Save changes';
  $('f-cancel').hidden = false;
  $('form-h').scrollIntoView();
  setFormLoading(true);
  const r = await api('GET', `/api/agents/${encodeURIComponent(name)}`);
  if (!r.ok || editing !== name) {
    if (editing === name) { notice(r.data.error || 'cannot load the agent'); resetForm(); }
    return;
  }
  const a = r.data;
  clearErrors();
  $('form-h').textContent = `Edit ${name}`;
  $('f-submit').textContent = 'Save changes';
  $('f-cancel').hidden = false;
  $('f-name').value = a.name;
  $('f-name').disabled = true;
  $('f-relay_url').value = a.relay_url || '';
  ensureBackendOption(a.backend);
  $('f-backend').value = a.backend;
  for (const k of ['display_name', 'agent_command', 'model', 'permission_mode', 'permission_policy', 'permission_policy_others', 'provider', 'system_prompt']) $(`f-${k}`).value = a[k] || '';
  $('f-agent_args').value = (a.agent_args || []).join('\n');
  $('f-agent_preset').value = presets.has(a.agent_preset) ? a.agent_preset : 'custom';
  apiKeySet = !!a.api_key_set;
  syncPreset();
  $('f-agent_command').value = a.agent_command || '';
  const names = [...(a.env_names || []), ...(a.secret_env_names || []).map((n) => `${n} (secret)`)];
  const env = $('env-names');
  env.hidden = !names.length;
  env.textContent = names.length
    ? `Environment variables (values are never shown here; edit them with the CLI): ${names.join(', ')}` : '';
  await loadSchema(a.backend, a.config || {});
  if (editing !== name) return;
  setFormLoading(false);
  $('f-relay_url').focus();
}

async function submitForm(e) {
  e.preventDefault();
  clearErrors();
  gate();
  if ($('f-submit').disabled) return;
  const body = {};
  for (const k of FORM_FIELDS) {
    if (k === 'agent_args') { body.agent_args = $('f-agent_args').value.split('\n').map((s) => s.trim()).filter(Boolean); continue; }
    if (k === 'name' && editing) continue;
    body[k] = $(`f-${k}`).value;
  }
  // The one secret the form sends; an empty field keeps a stored key.
  const key = $('api-key-field').hidden ? '' : $('f-api_key').value;
  if (key.trim()) body.api_key = key;
  if (body.backend.startsWith('provider:')) {
    const { config, errors } = readConfig();
    if (Object.keys(errors).length) { showErrors(Object.fromEntries(Object.entries(errors).map(([k, v]) => [`config.${k}`, v]))); return; }
    body.config = config;
  }
  const r = editing
    ? await api('PUT', `/api/agents/${encodeURIComponent(editing)}`, body)
    : await api('POST', '/api/agents', body);
  if (!r.ok) {
    if (r.data.fields) showErrors(r.data.fields); else $('err-_form').textContent = r.data.error || 'not saved';
    return;
  }
  const saved = r.data.name;
  const note = r.data.applies_after_restart ? ' The edit applies after the agent\'s next restart.' : '';
  const warn = (r.data.warnings || []).map((w) => ` Warning: ${w}`).join('');
  $('f-api_key').value = '';
  await loadAgents();
  resetForm();
  $('f-result').textContent = `Saved ${saved}.${note}${warn}`;
}

// ---- providers ----------------------------------------------------------------------------

async function loadProviders() {
  const r = await api('GET', '/api/providers');
  if (!r.ok) { $('prov-strict').textContent = r.data.error || 'cannot list providers'; return; }
  const d = r.data;
  $('prov-strict').textContent = d.strict
    ? 'Strict mode is on: only approved provider digests may run.'
    : 'Strict mode is off: any discovered provider may run (approvals are recorded anyway).';
  $('prov-override').hidden = !d.override_note;
  $('prov-override').textContent = d.override_note || '';
  const list = $('providers');
  list.replaceChildren();
  const sel = $('f-backend');
  const current = sel.value;
  for (const o of [...sel.options]) if (o.value !== 'local') o.remove();
  if (!d.providers.length) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'No providers found (buzz-backend-<id> in BUZZ_PROVIDER_PATH, the launcher\'s directory, PATH, ~/.local/bin).';
    list.appendChild(li);
  }
  for (const p of d.providers) {
    ensureBackendOption(`provider:${p.id}`);
    const li = document.createElement('li');
    li.className = 'provider';
    li.dataset.provider = p.id;
    const title = document.createElement('p');
    const strong = document.createElement('strong');
    strong.textContent = p.id;
    title.append(strong, ` — ${p.approved ? 'approved' : 'not approved'}`);
    const path = document.createElement('p');
    path.textContent = `Selected: ${p.path}`;
    const digest = document.createElement('p');
    digest.textContent = p.sha256 ? `sha256 ${p.sha256}` : `cannot hash: ${p.stage_error}`;
    const diag = document.createElement('p');
    diag.className = 'muted';
    diag.textContent = p.diagnostics;
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.textContent = p.approved ? 'Approved' : 'Approve';
    btn.disabled = !!p.approved || !p.sha256;
    btn.setAttribute('aria-label', `Approve provider ${p.id} with this digest`);
    btn.addEventListener('click', async () => {
      const a = await api('POST', `/api/providers/${encodeURIComponent(p.id)}/approve`);
      if (!a.ok) diag.textContent = a.data.error || 'approve failed';
      await loadProviders();
    });
    li.append(title, path, digest, diag, btn);
    list.appendChild(li);
  }
  if ([...sel.options].some((o) => o.value === current)) sel.value = current;
  const other = $('prov-other');
  other.replaceChildren();
  for (const s of d.shadowed) {
    const li = document.createElement('li');
    li.textContent = `shadowed ${s.path} (by ${s.by})`;
    other.appendChild(li);
  }
  for (const x of d.rejected) {
    const li = document.createElement('li');
    li.textContent = `rejected ${x.path}: ${x.reason}`;
    other.appendChild(li);
  }
  if (!d.shadowed.length && !d.rejected.length) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'none';
    other.appendChild(li);
  }
}

// ---- live events (Server-Sent Events read through fetch, so the token travels in a header) --

let reloadTimer = null;
function reloadSoon() {
  clearTimeout(reloadTimer);
  reloadTimer = setTimeout(loadAgents, 100);
}

function onEvent(ev) {
  switch (ev.type) {
    case 'hello':
      $('live').textContent = 'live';
      for (const c of cards.values()) c.dataset.rev = '0';
      loadAgents();
      break;
    case 'agents': reloadSoon(); break;
    case 'presence': {
      const card = cards.get(ev.name);
      if (card) setPresence(card, ev.state, ev.last_seen, ev.rev, ev.sleeps_at);
      else reloadSoon();
      break;
    }
    case 'progress': progressLine(ev.name, ev.line); break;
    case 'activity': setActivity(ev.name, ev.text, ev.busy); break;
    case 'busy': { const c = cards.get(ev.name); if (c) setBusy(c, ev.busy); break; }
    case 'done': {
      progressLine(ev.name, ev.ok ? ev.message : `failed: ${ev.message}`);
      const c = cards.get(ev.name);
      if (c) setBusy(c, false);
      reloadSoon();
      break;
    }
    default: break;
  }
}

async function listen() {
  for (;;) {
    try {
      const r = await fetch('/api/events', { headers: { Authorization: 'Bearer ' + token } });
      if (r.status === 401) { notice('This page has no valid token: open the URL printed by `buzz-launcher ui`.'); return; }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
          if (data) { try { onEvent(JSON.parse(data)); } catch (_) { /* a malformed frame is skipped */ } }
        }
      }
    } catch (_) { /* reconnect below */ }
    $('live').textContent = 'reconnecting…';
    await new Promise((res) => setTimeout(res, 1000));
  }
}

function init() {
  if (!token) {
    notice('Open the URL printed by `buzz-launcher ui` (it carries the page token).');
    $('live').textContent = 'no token';
    return;
  }
  $('agent-form').addEventListener('submit', submitForm);
  $('f-cancel').addEventListener('click', resetForm);
  $('f-backend').addEventListener('change', () => { syncPreset(); loadSchema($('f-backend').value, null); });
  $('f-agent_preset').addEventListener('change', syncPreset);
  $('f-name').addEventListener('input', gate);
  $('f-relay_url').addEventListener('input', gate);
  setInterval(() => { for (const c of cards.values()) c.querySelector('.seen').textContent = seenText(Number(c.dataset.seen) || 0); }, 5000);
  gate();
  loadPresets();
  loadProviders();
  listen();
}

init();
