// The sked dashboard: a page of the public HTTP API (/v1), nothing else.
//
// Every value from the server reaches the page as text (textContent, attribute values set
// through the DOM), never as HTML: a payload or error message that looks like markup is shown
// as what it is. The server's Content-Security-Policy forbids inline script besides.

const REFRESH_MS = 2000;
const PAYLOAD_PREVIEW = 4000;
const STATES = ["waiting", "scheduled", "available", "running", "retrying", "succeeded", "dead", "cancelled", "expired"];

let token = sessionStorage.getItem("sked-token");
let live = true;
let timer = null;
let rendering = false;
let again = false; // a refresh was asked for while one was running: run it after

// ---- DOM helpers -------------------------------------------------------------------------

/** An element with attributes (on* keys become listeners) and children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function svg(tag, attrs = {}) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function pill(state) {
  return h("span", { class: `pill s-${state}`, "data-state": state }, state);
}

function truncate(s, n) {
  if (s === null || s === undefined) return "";
  s = String(s);
  return s.length > n ? s.slice(0, n) + "…" : s;
}

// ---- time ----------------------------------------------------------------------------------

/**
 * The one way times are shown, as the CLI shows them: date, time to the second and the offset
 * of the zone (`2026-11-29 03:00:00+01:00`, in UTC `…Z`); in `tz`, or the browser's zone.
 */
function humanIn(ts, tz) {
  const parts = new Intl.DateTimeFormat("en-US", {
    timeZone: tz,
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
    timeZoneName: "longOffset",
  }).formatToParts(new Date(ts));
  const p = Object.fromEntries(parts.map((x) => [x.type, x.value]));
  const zone = tz || Intl.DateTimeFormat().resolvedOptions().timeZone;
  const offset = zone === "UTC" || zone === "Etc/UTC" ? "Z" : p.timeZoneName.replace("GMT", "") || "+00:00";
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second}${offset}`;
}

function fmtTime(ts) {
  if (!ts) return "—";
  return humanIn(ts);
}

function relative(ts) {
  if (!ts) return "";
  const diff = (new Date(ts).getTime() - Date.now()) / 1000;
  const a = Math.abs(diff);
  const [n, unit] =
    a < 60 ? [Math.round(a), "s"] : a < 3600 ? [Math.round(a / 60), "m"] : a < 86400 ? [Math.round(a / 3600), "h"] : [Math.round(a / 86400), "d"];
  return diff >= 0 ? `in ${n}${unit}` : `${n}${unit} ago`;
}

function when(ts) {
  if (!ts) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: ts, title: ts }, fmtTime(ts), h("span", { class: "muted" }, ` (${relative(ts)})`));
}

/** A schedule's time in the schedule's own zone (as its spec means it), then how far off. */
function zoned(ts, tz) {
  if (!ts) return h("span", { class: "muted" }, "—");
  let text;
  try {
    text = humanIn(ts, tz);
  } catch {
    return when(ts);
  }
  return h("time", { datetime: ts, title: `${fmtTime(ts)} here; ${ts}` }, `${text} `, h("span", { class: "muted" }, `${tz} (${relative(ts)})`));
}

// ---- API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
  });
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    if (resp.status === 401) askToken();
    throw new ApiError(resp.status, err.code || "error", err.message || `${resp.status} ${resp.statusText}`);
  }
  return data;
}

const get = (path) => api("GET", path);
const post = (path, body) => api("POST", path, body);

function askToken() {
  const dlg = document.getElementById("login");
  if (!dlg.open) dlg.showModal();
}

document.getElementById("login-form").addEventListener("submit", () => {
  token = document.getElementById("login-token").value.trim() || null;
  if (token) sessionStorage.setItem("sked-token", token);
  refresh(true);
});

// ---- flash messages and actions -------------------------------------------------------------

function flash(message, kind = "ok") {
  const el = document.getElementById("flash");
  el.textContent = message;
  el.className = kind;
  el.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => (el.hidden = true), 5000);
}

/** A button that runs `fn`, reports the outcome and refreshes the page. */
function action(label, fn, opts = {}) {
  return h(
    "button",
    {
      type: "button",
      class: opts.danger ? "danger" : "",
      "data-action": opts.name || label.toLowerCase(),
      onclick: async (ev) => {
        if (opts.confirm && !window.confirm(opts.confirm)) return;
        ev.target.disabled = true;
        try {
          await fn();
          flash(opts.done || `${label}: done`);
        } catch (e) {
          flash(`${label} failed: ${e.message}`, "error");
        } finally {
          ev.target.disabled = false;
          refresh(true);
        }
      },
    },
    label,
  );
}

const enc = encodeURIComponent;

// ---- views -----------------------------------------------------------------------------------

function table(headers, rows, empty = "Nothing here.") {
  if (!rows.length) return h("p", { class: "muted empty" }, empty);
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
}

function queueRow(q) {
  const counts = STATES.map((s) => {
    const n = (q.counts && q.counts[s]) || 0;
    // Counting stops at a limit (10,000 by default): beyond it the count reads "10,000+".
    const more = (q.counts_at_least || []).includes(s);
    const shown = `${n.toLocaleString("en-US")}${more ? "+" : ""}`;
    const title = more ? `${shown}: counting stops here` : null;
    return h("td", { class: n ? "num" : "num zero", title }, n ? h("a", { href: `#/tasks?state=${s}&queue=${enc(q.name)}` }, shown) : "0");
  });
  return h(
    "tr",
    { "data-queue": q.name },
    h("td", {}, h("a", { href: `#/tasks?queue=${enc(q.name)}` }, q.name), q.paused ? h("span", { class: "tag" }, "paused") : null),
    counts,
    h("td", { class: "num" }, q.concurrency_limit ?? "—"),
    // The rate limit with the starts its window holds now, and what holds the queue back.
    h("td", { class: "num", "data-rate": q.rate || "" }, q.rate ? `${q.rate_window ?? 0} of ${q.rate}` : "—"),
    // Per concurrency key: tasks running at once, and starts per window.
    h("td", { class: "num", "data-per-key": q.per_key ?? "" }, perKeyText(q)),
    h("td", { "data-held": q.held ? q.held.by : "" }, q.held ? heldText(q.held) : "—"),
    h(
      "td",
      {},
      q.paused
        ? action("Resume", () => post(`/v1/queues/${enc(q.name)}/resume`), { name: "resume-queue" })
        : action("Pause", () => post(`/v1/queues/${enc(q.name)}/pause`), { name: "pause-queue", confirm: `Pause queue ${q.name}? Workers stop claiming from it.` }),
    ),
  );
}

/** Per concurrency key: tasks running at once, starts per window, strict order and the keys a dead task stops. */
function perKeyText(q) {
  const limits = [q.per_key, q.per_key_rate].filter((x) => x !== undefined && x !== null).join(", ") || "—";
  if (q.key_order !== "strict") return limits;
  return q.keys_stopped ? `${limits} strict (${q.keys_stopped} stopped)` : `${limits} strict`;
}

function heldText(held) {
  const by = { paused: "paused", concurrency: "at its concurrency limit", rate: "at its rate limit" }[held.by] || held.by;
  return held.until ? `${by} until ${humanIn(held.until)}` : by;
}

function activityChart(buckets) {
  const W = 600, H = 120, pad = 18;
  const kinds = [["succeeded", "ok"], ["failed", "warn"], ["dead", "bad"], ["cancelled", "muted"], ["expired", "muted"]];
  const max = Math.max(1, ...buckets.map((b) => kinds.reduce((n, [k]) => n + b[k], 0)));
  const bw = (W - pad) / buckets.length;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H + pad}`, class: "chart", role: "img", "aria-label": "Ended tasks per minute" });
  buckets.forEach((b, i) => {
    let y = H;
    for (const [k, cls] of kinds) {
      if (!b[k]) continue;
      const bh = (b[k] / max) * (H - 4);
      y -= bh;
      const r = svg("rect", { x: pad + i * bw + 1, y, width: Math.max(1, bw - 2), height: bh, class: `bar ${cls}` });
      const t = svg("title");
      t.textContent = `${new Date(b.start).toLocaleTimeString()}: ${b[k]} ${k}`;
      r.append(t);
      chart.append(r);
    }
  });
  const axis = svg("text", { x: pad, y: H + 14, class: "axis" });
  axis.textContent = `${buckets.length} min ago`;
  const now = svg("text", { x: W, y: H + 14, class: "axis", "text-anchor": "end" });
  now.textContent = "now";
  const top = svg("text", { x: 0, y: 10, class: "axis" });
  top.textContent = String(max);
  chart.append(axis, now, top);
  const totals = kinds.map(([k, cls]) =>
    h("span", { class: `legend ${cls}`, "data-total": k }, `${k} ${buckets.reduce((n, b) => n + b[k], 0)}`),
  );
  return h("div", {}, chart, h("div", { class: "legends" }, totals));
}

async function overview(clusterReply) {
  const [queues, activity, workers, cluster, kinds] = await Promise.all([
    get("/v1/queues?limit=1000"),
    get("/v1/activity?minutes=15"),
    get("/v1/workers?limit=1000"),
    clusterReply,
    get("/v1/kinds?minutes=60"),
  ]);
  const alive = workers.workers.filter((w) => w.alive);
  const nodes = alive.filter((w) => w.role === "node");
  const busy = alive.filter((w) => w.role === "worker");
  const failing = queues.queues.reduce((n, q) => n + ((q.counts && q.counts.dead) || 0), 0);
  return [
    h("h1", {}, "Overview"),
    h(
      "section",
      { class: "cards" },
      h("div", { class: "card" }, h("div", { class: "big" }, busy.length), "workers alive"),
      h("div", { class: "card" }, h("div", { class: "big" }, nodes.length), "nodes alive"),
      h("div", { class: "card" }, h("div", { class: "big", id: "leader" }, cluster.leader || "none"), "leader"),
      h("div", { class: "card" }, h("div", { class: `big ${failing ? "bad" : ""}` }, failing), h("a", { href: "#/tasks?state=dead" }, "dead tasks")),
    ),
    h("h2", {}, "Last 15 minutes"),
    activityChart(activity.buckets),
    h("h2", {}, "Queues"),
    table(["queue", ...STATES, "limit", "rate", "per key", "held", ""], queues.queues.map(queueRow), "No queues yet: enqueue a task."),
    h("h2", {}, "Kinds, last hour", kinds.sampled ? h("span", { class: "muted small" }, " (of a sample: more ran than are read)") : null),
    table(["kind", "runs / min", "failed", "cancelled", "run time p50", "p95"], kinds.kinds.map(kindRow), "Nothing ran in the last hour."),
    queues.next_after ? h("p", { class: "muted small", id: "queues-more" }, `The first ${queues.queues.length} queues by name; sked queue ls lists them all.`) : null,
  ];
}

/** A duration in milliseconds as people read it: 850 ms, 12.3 s, 4.5 min. */
function ms(n) {
  if (n === null || n === undefined) return "—";
  if (n < 1000) return `${n} ms`;
  if (n < 60_000) return `${(n / 1000).toFixed(1)} s`;
  return `${(n / 60_000).toFixed(1)} min`;
}

function kindRow(k) {
  const rate = `${(k.failure_rate * 100).toFixed(k.failure_rate > 0 && k.failure_rate < 0.01 ? 2 : 0)}%`;
  return h(
    "tr",
    { "data-kind": k.kind },
    h("td", {}, h("a", { href: `#/tasks?kind=${enc(k.kind)}` }, k.kind)),
    h("td", { class: "num" }, k.runs_per_minute.toFixed(k.runs_per_minute < 10 ? 2 : 0)),
    h("td", { class: `num ${k.failed ? "bad" : ""}`, title: `${k.failed} of ${k.runs} runs` }, rate),
    h("td", { class: "num" }, k.cancelled),
    h("td", { class: "num" }, ms(k.p50_ms)),
    h("td", { class: "num" }, ms(k.p95_ms)),
  );
}

function outcome(s) {
  if (s.running) return pill("running");
  if (s.retrying) return h("span", { "data-retrying": s.retrying.task_id }, pill("retrying"), ` ${s.retrying.attempt}/${s.retrying.max_attempts} `, h("a", { href: `#/tasks/${s.retrying.task_id}` }, `#${s.retrying.task_id}`));
  return s.last_outcome ? pill(s.last_outcome) : h("span", { class: "muted" }, "never ran");
}

function specCell(s) {
  return h("td", {}, h("code", {}, s.spec), s.description ? h("div", { class: "muted small" }, s.description) : null);
}

async function schedules(query) {
  const q = new URLSearchParams(query || "");
  const f = { after: q.get("after") || "", prefix: q.get("prefix") || "", show: q.get("show") || "" };
  const params = new URLSearchParams({ limit: "100", include: "count" });
  for (const k of ["after", "prefix"]) if (f[k]) params.set(k, f[k]);
  if (f.show === "paused") params.set("paused", "true");
  if (f.show === "active") params.set("paused", "false");
  if (f.show === "failing") params.set("failing", "true");
  const { schedules, next_after, count, count_at_least } = await get(`/v1/schedules?${params}`);
  const rows = schedules.map((s) =>
    h(
      "tr",
      { "data-schedule": s.name },
      h("td", {}, h("a", { href: `#/schedules/${enc(s.name)}` }, s.name), s.paused ? h("span", { class: "tag" }, "paused") : null, s.declared_by ? h("span", { class: "tag muted", title: "declared in code" }, s.declared_by) : null),
      specCell(s),
      h("td", {}, s.tz),
      h("td", {}, s.paused || s.ended ? h("span", { class: "muted" }, s.paused ? "paused" : "ended") : zoned(s.next_fire_at, s.tz)),
      h("td", {}, when(s.last_started_at)),
      h("td", {}, when(s.last_finished_at)),
      h("td", {}, outcome(s)),
      h("td", { class: "actions" }, scheduleActions(s)),
    ),
  );
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (ev) => {
        ev.preventDefault();
        const d = new FormData(ev.target);
        const p = new URLSearchParams();
        for (const k of ["prefix", "show"]) if (d.get(k)) p.set(k, d.get(k));
        location.hash = `#/schedules?${p}`;
      },
    },
    h("label", {}, "name starts with ", h("input", { name: "prefix", value: f.prefix, size: 16, placeholder: "tenant-42-" })),
    h("label", {}, "show ", h("select", { name: "show" }, ["all", "active", "paused", "failing"].map((v) => h("option", { value: v === "all" ? "" : v, selected: (f.show || "") === (v === "all" ? "" : v) }, v)))),
    h("button", { type: "submit" }, "Search"),
  );
  const filtered = f.prefix || f.show;
  const next = new URLSearchParams(Object.fromEntries(Object.entries({ prefix: f.prefix, show: f.show, after: next_after }).filter(([, v]) => v)));
  return [
    h("h1", {}, "Schedules ", h("span", { class: "muted small", "data-count": String(count) }, `${count.toLocaleString()}${count_at_least ? "+" : ""} ${filtered ? "match" : "in all"}`)),
    h("div", { class: "actions" }, h("a", { class: "button", href: "#/schedules/new", "data-action": "new-schedule" }, "New schedule")),
    form,
    table(["name", "spec", "zone", "next fire", "last start", "last stop", "last outcome", ""], rows, filtered ? "No schedules match." : "No schedules yet: sked schedule add …"),
    next_after ? h("a", { class: "button", href: `#/schedules?${next}` }, "Next →") : null,
  ];
}

function scheduleActions(s) {
  const n = enc(s.name);
  return [
    action("Trigger", () => post(`/v1/schedules/${n}/trigger`), { name: "trigger", done: `${s.name}: triggered` }),
    s.paused
      ? action("Resume", () => post(`/v1/schedules/${n}/resume`), { name: "resume" })
      : action("Pause", () => post(`/v1/schedules/${n}/pause`), { name: "pause" }),
  ];
}

async function schedule(name) {
  const [s, occ] = await Promise.all([
    get(`/v1/schedules/${enc(name)}`),
    get(`/v1/schedules/${enc(name)}/occurrences?limit=100`),
  ]);
  const dl = (pairs) => h("dl", {}, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  const rows = occ.occurrences.map((o) =>
    h(
      "tr",
      { "data-outcome": o.outcome },
      h("td", {}, zoned(o.nominal_at, s.tz)),
      h("td", {}, h("span", { class: `pill o-${o.outcome}` }, o.outcome)),
      h("td", {}, o.task_id ? h("a", { href: `#/tasks/${o.task_id}` }, `#${o.task_id}`) : "—"),
      h("td", {}, o.task_state ? pill(o.task_state) : "—"),
      h("td", {}, o.detail || ""),
    ),
  );
  return [
    h("h1", {}, "Schedule ", h("span", { class: "name" }, s.name), s.paused ? h("span", { class: "tag" }, "paused") : null),
    h(
      "div",
      { class: "actions" },
      scheduleActions(s),
      h("a", { class: "button", href: `#/schedules/${enc(s.name)}/edit`, "data-action": "edit" }, "Edit"),
      h("a", { class: "button", href: `#/tasks?schedule=${enc(s.name)}` }, "Its tasks"),
      action(
        "Delete",
        async () => {
          await api("DELETE", `/v1/schedules/${enc(s.name)}`);
          location.hash = "#/schedules";
        },
        { name: "delete", danger: true, confirm: `Delete schedule ${s.name}? Its tasks stay.`, done: `${s.name}: deleted` },
      ),
    ),
    dl([
      ["spec", [h("code", {}, s.spec), s.description ? h("div", { class: "muted" }, s.description) : null]],
      ["time zone", s.tz],
      ["next fire", s.paused ? "paused" : s.ended ? h("span", { class: "muted" }, "ended") : zoned(s.next_fire_at, s.tz)],
      s.ended ? ["ended", s.ended] : null,
      s.start_at ? ["starts", zoned(s.start_at, s.tz)] : null,
      s.end_at ? ["ends", zoned(s.end_at, s.tz)] : null,
      ["runs", s.max_runs ? `${s.runs} of at most ${s.max_runs}` : String(s.runs)],
      ["last start", when(s.last_started_at)],
      ["last stop", when(s.last_finished_at)],
      ["running", s.running ? "yes" : "no"],
      ["last outcome", outcome(s)],
      s.paused_reason ? ["paused", s.paused_reason] : null,
      ["overlap", s.overlap],
      ["catch-up", `${s.catchup} (window ${s.catchup_window})`],
      s.from !== "fixed" ? ["interval from", s.from === "last_start" ? "the last run's start" : "the last run's end"] : null,
      ["DST", { debian: "debian (a skipped time runs after the gap, a repeated one once)", skip: "skip (a skipped time does not run, a repeated one once)", twice: "twice (a repeated time runs at both instants)" }[s.dst] || s.dst],
      s.jitter ? ["jitter", `up to ${s.jitter}, the same on every node`] : null,
      s.pause_after_failures ? ["pauses after", `${s.pause_after_failures} dead runs in a row`] : null,
      s.workflow
        ? ["workflow", h("code", {}, workflowSummary(s.workflow))]
        : ["task", h("code", {}, `${s.task.kind} on ${s.task.queue}`)],
      ["declared by", s.declared_by || "made at run time (API or CLI)"],
    ]),
    h("h2", {}, "Occurrences"),
    h("p", { class: "muted small" }, "Every fire time and what became of it: enqueued, skipped by the overlap policy, buffered, or missed while no scheduler ran."),
    table(["due", "outcome", "task", "task state", "detail"], rows, "No occurrences yet."),
  ];
}

/** A workflow a schedule starts, in one line: `etl: extract (shell); load (shell) after extract`. */
function workflowSummary(w) {
  const tasks = w.tasks.map((t) => `${t.name} (${t.kind})${t.after && t.after.length ? ` after ${t.after.join(", ")}` : ""}`);
  return `${w.name || "unnamed"}: ${tasks.join("; ")}`;
}

/** The fields of a schedule that `PUT /v1/schedules/{name}` takes, from what `GET` answers. */
const SCHEDULE_FIELDS = ["spec", "tz", "task", "workflow", "overlap", "catchup", "catchup_window", "from", "dst", "jitter", "pause_after_failures", "keep_retrying", "paused"];

/** A form that creates a schedule (`name` absent) or replaces one, whole, with `PUT`. */
async function scheduleForm(name) {
  const s = name ? await get(`/v1/schedules/${enc(name)}`) : { tz: "UTC", overlap: "skip", task: { kind: "", queue: "default", payload: null } };
  const problem = h("p", { class: "problem", id: "form-problem", hidden: true });
  const field = (label, input, hint) => h("label", { class: "field" }, h("span", {}, label), input, hint ? h("span", { class: "muted small" }, hint) : null);
  const form = h(
    "form",
    {
      class: "edit",
      "data-form": "schedule",
      onsubmit: async (ev) => {
        ev.preventDefault();
        const d = new FormData(ev.target);
        const target = name || String(d.get("name") || "").trim();
        const json = (what) => {
          const text = String(d.get(what) || "").trim();
          return text ? JSON.parse(text) : null;
        };
        let payload, workflow;
        try {
          if (s.workflow) workflow = json("workflow");
          else payload = json("payload");
        } catch (e) {
          problem.textContent = `The ${s.workflow ? "workflow" : "payload"} is not JSON: ${e.message}`;
          problem.hidden = false;
          return;
        }
        const body = {};
        for (const k of SCHEDULE_FIELDS) if (s[k] !== undefined && s[k] !== null) body[k] = s[k];
        body.spec = String(d.get("spec") || "").trim();
        body.tz = String(d.get("tz") || "").trim() || "UTC";
        body.overlap = String(d.get("overlap"));
        if (s.workflow) body.workflow = workflow;
        else body.task = { ...(s.task || {}), kind: String(d.get("kind") || "").trim(), queue: String(d.get("queue") || "").trim() || "default", payload };
        try {
          await api("PUT", `/v1/schedules/${enc(target)}`, body);
        } catch (e) {
          problem.textContent = e.message;
          problem.hidden = false;
          return;
        }
        flash(`${target}: ${name ? "saved" : "created"}`);
        location.hash = `#/schedules/${enc(target)}`;
      },
    },
    name ? null : field("name", h("input", { name: "name", required: true, size: 30, placeholder: "nightly-report" })),
    field("spec", h("input", { name: "spec", required: true, size: 30, value: s.spec || "", placeholder: "0 3 * * *" }), "cron (5 or 6 fields, or @daily) or every DUR"),
    field("time zone", h("input", { name: "tz", size: 20, value: s.tz || "UTC" })),
    ...(s.workflow
      ? [field("workflow", h("textarea", { name: "workflow", rows: 14, cols: 60 }, JSON.stringify(s.workflow, null, 2)), "JSON: the tasks each occurrence starts, each with its name and what it runs after")]
      : [
          field("kind", h("input", { name: "kind", required: true, size: 30, value: (s.task && s.task.kind) || "" })),
          field("queue", h("input", { name: "queue", size: 20, value: (s.task && s.task.queue) || "default" })),
          field("payload", h("textarea", { name: "payload", rows: 5, cols: 60 }, s.task && s.task.payload !== null && s.task.payload !== undefined ? JSON.stringify(s.task.payload, null, 2) : ""), "JSON"),
        ]),
    field("overlap", h("select", { name: "overlap" }, ["skip", "allow", "buffer_one", "replace"].map((o) => h("option", { value: o, selected: String(s.overlap || "skip").startsWith(o) }, o)))),
    problem,
    h("button", { type: "submit", "data-action": "save" }, name ? "Save" : "Create"),
    h("a", { class: "button", href: name ? `#/schedules/${enc(name)}` : "#/schedules" }, "Back"),
  );
  return [h("h1", {}, name ? ["Edit schedule ", h("span", { class: "name" }, name)] : "New schedule"), form];
}

/** The task filters a tasks page's address holds. */
const TASK_FILTERS = ["state", "queue", "kind", "key", "unique_key", "since", "until", "schedule", "workflow"];

function parseQuery(q) {
  const p = new URLSearchParams(q || "");
  return Object.fromEntries([...TASK_FILTERS, "before"].map((k) => [k, p.get(k) || ""]));
}

/** An RFC 3339 time as a datetime-local input shows it, in the browser's zone. */
function localInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

const FINISHED = ["succeeded", "dead", "cancelled", "expired"];
const UNFINISHED = ["waiting", "scheduled", "available", "retrying", "running"];

/** The states a bulk action over the page's filter takes: the chosen one if it applies, or
 * all it applies to (a retry: dead and cancelled); null when it does not apply. */
function bulkStates(act, state) {
  const applies = act === "cancel" ? UNFINISHED : FINISHED;
  if (state) return applies.includes(state) ? [state] : null;
  return act === "retry" ? ["dead", "cancelled", "expired"] : applies;
}

/** A bulk action over every task the filter matches: counted first, confirmed, then done a
 * batch at a time (each one short transaction), its progress shown. */
function bulkButton(act, f) {
  const states = bulkStates(act, f.state);
  if (!states) return null;
  const [label, verb, did] = { retry: ["Retry all…", "Retry", "retried"], cancel: ["Cancel all…", "Cancel", "cancelled"], delete: ["Delete all…", "Delete", "deleted"] }[act];
  const filter = { action: act, state: states };
  for (const k of ["queue", "kind", "key", "unique_key", "since"]) if (f[k]) filter[k] = f[k];
  if (f.until) filter.before = f.until;
  if (f.workflow) filter.workflow = Number(f.workflow);
  return h(
    "button",
    {
      type: "button",
      class: act === "retry" ? "" : "danger",
      "data-action": `bulk-${act}`,
      onclick: async (ev) => {
        ev.target.disabled = true;
        try {
          const { matched } = await post("/v1/tasks/bulk", { ...filter, dry_run: true });
          if (!matched) {
            flash(`No ${states.join(" or ")} task matches.`);
            return;
          }
          if (!window.confirm(`${verb} ${matched.toLocaleString("en-US")} ${states.join(" or ")} tasks that match this filter?`)) return;
          let changed = 0;
          let after = null;
          do {
            const answer = await post("/v1/tasks/bulk", { ...filter, after, limit: 1000 });
            changed += answer.changed;
            after = answer.next_after;
            flash(`${did} ${changed.toLocaleString("en-US")} of ${matched.toLocaleString("en-US")}…`);
          } while (after !== null && after !== undefined);
          flash(`${did} ${changed.toLocaleString("en-US")} tasks`);
        } catch (e) {
          flash(`${verb} failed: ${e.message}`, "error");
        } finally {
          ev.target.disabled = false;
          refresh(true);
        }
      },
    },
    label,
  );
}

/** What a waiting task waits for, as links: " for #12, #13". */
function waitingFor(t) {
  if (t.state !== "waiting" || !(t.waiting_for || []).length) return null;
  return h("span", { class: "waiting-for" }, " for ", ...taskLinks(t.waiting_for));
}

/** Task ids as links, comma-separated. */
function taskLinks(ids) {
  return ids.flatMap((id, i) => [i ? ", " : "", h("a", { href: `#/tasks/${id}` }, `#${id}`)]);
}

function taskRow(t) {
  return h(
    "tr",
    { "data-task": t.id, "data-state": t.state },
    h("td", {}, h("a", { href: `#/tasks/${t.id}` }, `#${t.id}`)),
    h("td", {}, t.kind),
    h("td", {}, t.queue),
    h("td", {}, pill(t.state), waitingFor(t)),
    h("td", { class: "num" }, `${t.attempt}/${t.max_attempts}`),
    h("td", {}, when(t.finished_at || t.run_at)),
    // A success's earlier errors are history (on its page), not a failure to show in red.
    t.state === "succeeded" ? h("td", {}) : h("td", { class: "error", title: t.last_error || "" }, truncate(t.last_error, 100)),
    h("td", { class: "actions" }, taskActions(t)),
  );
}

function taskActions(t) {
  const out = [];
  const retry = () => post(`/v1/tasks/${t.id}/retry`);
  const done = `#${t.id}: queued to run now`;
  if (["dead", "cancelled", "expired"].includes(t.state)) {
    out.push(action("Retry", retry, { name: "retry", done }));
  } else if (["retrying", "scheduled"].includes(t.state)) {
    out.push(action("Run now", retry, { name: "run-now", done }));
  } else if (t.state === "succeeded") {
    // Work done twice by accident is worse than a second click.
    out.push(action("Run again", retry, { name: "run-again", done, confirm: `Task #${t.id} succeeded. Run it again?` }));
  }
  if (!FINISHED.includes(t.state)) {
    out.push(action("Cancel", () => post(`/v1/tasks/${t.id}/cancel`), { name: "cancel", danger: true, confirm: `Cancel task #${t.id}?` }));
  }
  return out;
}

async function tasks(query) {
  const f = parseQuery(query);
  const params = new URLSearchParams({ limit: "50" });
  for (const k of [...TASK_FILTERS, "before"]) if (f[k]) params.set(k, f[k]);
  const { tasks } = await get(`/v1/tasks?${params}`);
  const input = (name, size, extra = {}) => h("input", { name, value: f[name], size, ...extra });
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (ev) => {
        ev.preventDefault();
        const d = new FormData(ev.target);
        const id = String(d.get("id") || "").trim().replace(/^#/, "");
        if (id) {
          location.hash = `#/tasks/${enc(id)}`;
          return;
        }
        const p = new URLSearchParams();
        for (const k of ["state", "queue", "kind", "key", "unique_key"]) if (d.get(k)) p.set(k, String(d.get(k)).trim());
        // Times are picked in the browser's zone and kept as RFC 3339.
        for (const k of ["since", "until"]) if (d.get(k)) p.set(k, new Date(String(d.get(k))).toISOString());
        if (f.schedule) p.set("schedule", f.schedule);
        if (f.workflow) p.set("workflow", f.workflow);
        location.hash = `#/tasks?${p}`;
      },
    },
    h("label", {}, "state ", h("select", { name: "state" }, h("option", { value: "" }, "any"), STATES.map((s) => h("option", { value: s, selected: s === f.state }, s)))),
    h("label", {}, "queue ", input("queue", 10)),
    h("label", {}, "kind ", input("kind", 12)),
    h("label", {}, "key ", input("key", 10)),
    h("label", {}, "unique key ", input("unique_key", 10)),
    h("label", {}, "enqueued from ", h("input", { type: "datetime-local", step: 1, name: "since", value: localInput(f.since) })),
    h("label", {}, "to ", h("input", { type: "datetime-local", step: 1, name: "until", value: localInput(f.until) })),
    h("button", { type: "submit", "data-action": "search" }, "Search"),
    h("label", {}, "id ", h("input", { name: "id", size: 8, placeholder: "go to #" })),
  );
  // Bulk actions apply to the filter, not to the page: every task it matches, counted first.
  const bulk = f.schedule ? null : h("div", { class: "actions bulk" }, ["retry", "cancel", "delete"].map((a) => bulkButton(a, f)));
  const older = tasks.length === 50
    ? h("a", { class: "button", href: `#/tasks?${new URLSearchParams({ ...Object.fromEntries(Object.entries(f).filter(([, v]) => v)), before: tasks[tasks.length - 1].id })}` }, "Older →")
    : null;
  return [
    h("h1", {}, "Tasks", f.schedule ? ` of schedule ${f.schedule}` : "", f.workflow ? ` of workflow #${f.workflow}` : ""),
    form,
    bulk,
    table(["id", "kind", "queue", "state", "attempt", "ran / runs", "last error", ""], tasks.map(taskRow), "No tasks match."),
    older,
  ];
}

/** JSON shown as text, cut at PAYLOAD_PREVIEW characters with a button for the rest. */
function jsonBlock(value, name) {
  const text = JSON.stringify(value, null, 2) ?? "null";
  const pre = h("pre", { class: "json", "data-json": name });
  if (text.length <= PAYLOAD_PREVIEW) {
    pre.textContent = text;
    return pre;
  }
  pre.textContent = text.slice(0, PAYLOAD_PREVIEW);
  const more = h(
    "button",
    {
      type: "button",
      "data-action": `show-all-${name}`,
      onclick: () => {
        pre.textContent = text;
        more.remove();
      },
    },
    `Show all (${text.length - PAYLOAD_PREVIEW} more characters)`,
  );
  return h("div", {}, pre, more);
}

function timeline(t) {
  const events = [["created", t.created_at]];
  if (t.nominal_at) events.push([`due by schedule ${t.schedule}`, t.nominal_at]);
  for (const a of t.attempts) {
    events.push([`attempt ${a.attempt} started on ${a.worker}`, a.started_at]);
    if (a.finished_at) events.push([`attempt ${a.attempt} ${a.outcome}${a.error ? ": " + truncate(a.error, 200) : ""}`, a.finished_at]);
  }
  if (!t.state.match(/succeeded|dead|cancelled|expired|running/)) events.push([`runs (${t.state})`, t.run_at]);
  if (t.expires_at && (t.state === "expired" || t.attempt === 0)) {
    events.push([t.state === "expired" ? "expired: not started by its deadline" : "must start by then, or it expires", t.expires_at]);
  }
  events.sort((a, b) => new Date(a[1]) - new Date(b[1]));
  return h("ol", { class: "timeline" }, events.map(([what, ts]) => h("li", {}, when(ts), " ", what)));
}

/** Why an available task waits, in words (with a link to the task it waits for). */
function taskHeldText(t, held) {
  if (held.by === "key_order" && held.behind) {
    const b = held.behind;
    const why = b.state === "dead" ? "dead: retry or delete it to go on" : b.state;
    return [`key ${t.key} runs its tasks in strict order: it waits for `, h("a", { href: `#/tasks/${b.id}` }, `#${b.id}`), ` (${why})`];
  }
  const until = held.until ? ` until ${humanIn(held.until)}` : "";
  const by = {
    paused: "its queue is paused",
    concurrency: "its queue runs as many tasks as its concurrency limit lets",
    rate: "its queue is at its rate limit",
    per_key: `key ${t.key} runs as many tasks as the queue's per-key limit lets`,
    per_key_rate: `key ${t.key} is at the queue's per-key rate`,
  }[held.by] || held.by;
  return `${by}${until}`;
}

async function task(id) {
  const t = await get(`/v1/tasks/${enc(id)}`);
  const held = t.state === "available" ? (await get(`/v1/tasks/${enc(id)}/held`)).held : null;
  const dl = (pairs) => h("dl", {}, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  const attempts = t.attempts.map((a) =>
    h(
      "tr",
      {},
      h("td", { class: "num" }, a.attempt),
      h("td", {}, a.worker),
      h("td", {}, when(a.started_at)),
      h("td", {}, when(a.finished_at)),
      h("td", {}, h("span", { class: `pill o-${a.outcome}` }, a.outcome)),
      h("td", { class: "error" }, a.error || ""),
    ),
  );
  return [
    h("h1", {}, `Task #${t.id} `, pill(t.state), waitingFor(t), t.cancel_requested && t.state === "running" ? h("span", { class: "tag" }, "cancel requested") : null),
    h("div", { class: "actions" }, taskActions(t)),
    dl([
      ["kind", t.kind],
      ["queue", t.queue],
      t.key ? ["key", t.key] : null,
      held ? ["waiting", h("span", { id: "held" }, taskHeldText(t, held))] : null,
      ["priority", t.priority],
      ["attempt", `${t.attempt} of ${t.max_attempts}`],
      ["run at", when(t.run_at)],
      ["schedule", t.schedule ? h("a", { href: `#/schedules/${enc(t.schedule)}` }, t.schedule) : "—"],
      t.workflow ? ["workflow", h("a", { id: "workflow", href: `#/workflows/${t.workflow.id}` }, `#${t.workflow.id} (${t.workflow.name})`)] : null,
      t.batch ? ["batch", h("a", { id: "batch", href: `#/batches/${t.batch}` }, `#${t.batch}`)] : null,
      (t.depends_on || []).length ? ["depends on", h("span", { id: "parents" }, ...taskLinks(t.depends_on))] : null,
      (t.dependents || []).length ? ["dependents", h("span", { id: "children" }, ...taskLinks(t.dependents))] : null,
      t.progress !== undefined && t.progress !== null
        ? ["progress", h("span", { id: "progress" }, typeof t.progress === "number" ? `${t.progress}%` : JSON.stringify(t.progress))]
        : null,
      ["unique key", t.unique_key || "—"],
      ["worker", t.worker || "—"],
      ["lease until", when(t.lease_expires_at)],
      t.state === "succeeded" && t.last_error
        ? ["earlier error", h("span", { class: "earlier", id: "last-error" }, t.last_error)]
        : ["last error", t.last_error ? h("span", { class: "error", id: "last-error" }, t.last_error) : "—"],
    ]),
    h("h2", {}, "Payload"),
    jsonBlock(t.payload, "payload"),
    t.result !== null && t.result !== undefined ? [h("h2", {}, "Result"), jsonBlock(t.result, "result")] : null,
    h("h2", {}, "Attempts"),
    table(["#", "worker", "start", "end", "outcome", "error"], attempts, "Not run yet."),
    h("h2", {}, "Timeline"),
    timeline(t),
  ];
}

// ---- workflows ---------------------------------------------------------------------------

/** The most tasks of one workflow the page reads and draws. */
const GRAPH_MAX = 500;

/** A workflow's tasks by state, in the order tasks move: `2 waiting, 1 running`. */
function countsText(counts) {
  const parts = STATES.filter((s) => counts[s]).map((s) => `${counts[s]} ${s}`);
  return parts.length ? parts.join(", ") : "no tasks left";
}

async function workflows(query) {
  const f = new URLSearchParams(query || "");
  const params = new URLSearchParams({ limit: "50" });
  if (f.get("before")) params.set("before", f.get("before"));
  const { workflows, next_before } = await get(`/v1/workflows?${params}`);
  const rows = workflows.map((w) =>
    h(
      "tr",
      { "data-workflow": w.id },
      h("td", {}, h("a", { href: `#/workflows/${w.id}` }, `#${w.id}`)),
      h("td", {}, w.name || "—"),
      h("td", {}, pill(w.state)),
      h("td", { class: "num" }, `${STATES.filter((s) => FINISHED.includes(s)).reduce((n, s) => n + (w.counts[s] || 0), 0)}/${w.total}`),
      h("td", { class: "small" }, countsText(w.counts)),
      h("td", {}, when(w.created_at)),
      h("td", {}, when(w.finished_at)),
    ),
  );
  return [
    h("h1", {}, "Workflows"),
    h("p", { class: "muted small" }, "Tasks made together that wait for one another by name: sked workflow add -f FILE, or POST /v1/workflows."),
    table(["id", "name", "state", "ended", "tasks", "created", "finished"], rows, "No workflow yet."),
    next_before ? h("a", { class: "button", href: `#/workflows?before=${next_before}` }, "Older →") : null,
  ];
}

/**
 * The graph of a workflow's tasks: each in the column of its longest path from a task that
 * waits for none, an arrow from each task to those that wait for it, coloured by state.
 */
function workflowGraph(nodes) {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const depth = new Map();
  const depthOf = (n) => {
    if (depth.has(n.name)) return depth.get(n.name);
    depth.set(n.name, 0); // a cycle cannot be made; this only stops a loop on bad data
    const d = Math.max(-1, ...n.after.map((a) => (byName.has(a) ? depthOf(byName.get(a)) : -1))) + 1;
    depth.set(n.name, d);
    return d;
  };
  const columns = [];
  for (const n of nodes) (columns[depthOf(n)] ||= []).push(n);
  const [W, H, GX, GY] = [150, 26, 60, 10];
  const rows = Math.max(...columns.map((c) => c.length));
  const width = columns.length * (W + GX);
  const height = rows * (H + GY) + GY;
  const at = new Map();
  columns.forEach((col, x) => col.forEach((n, y) => at.set(n.name, [x * (W + GX) + 10, y * (H + GY) + GY])));
  const root = svg("svg", { class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "the workflow's tasks and what each waits for" });
  for (const n of nodes) {
    const [x2, y2] = at.get(n.name);
    for (const a of n.after) {
      if (!at.has(a)) continue;
      const [x1, y1] = at.get(a);
      root.append(svg("line", { class: "edge", x1: x1 + W, y1: y1 + H / 2, x2, y2: y2 + H / 2 }));
    }
  }
  for (const n of nodes) {
    const [x, y] = at.get(n.name);
    const link = svg("a", { href: `#/tasks/${n.id}`, "data-node": n.name, "data-state": n.state });
    link.append(svg("rect", { class: `node s-${n.state}`, x, y, width: W, height: H, rx: 4 }));
    const label = svg("text", { x: x + 8, y: y + H / 2 + 4 });
    label.textContent = truncate(n.name, 18);
    const title = svg("title", {});
    title.textContent = `${n.name} (#${n.id}): ${n.state}`;
    link.append(label, title);
    root.append(link);
  }
  return h("div", { class: "graph-box" }, root);
}

async function workflow(id) {
  const [w, page] = await Promise.all([get(`/v1/workflows/${enc(id)}`), get(`/v1/workflows/${enc(id)}/tasks?limit=${GRAPH_MAX}`)]);
  const nodes = page.tasks;
  const rows = nodes.map((n) =>
    h(
      "tr",
      {},
      h("td", {}, n.name),
      h("td", {}, h("a", { href: `#/tasks/${n.id}` }, `#${n.id}`)),
      h("td", {}, pill(n.state)),
      h("td", {}, n.kind),
      h("td", {}, n.after.length ? n.after.join(", ") : "—"),
    ),
  );
  const actions = w.done
    ? []
    : [action("Cancel", () => post(`/v1/workflows/${w.id}/cancel`), { name: "cancel", danger: true, confirm: `Cancel every task of workflow #${w.id} that has not ended?` })];
  return [
    h("h1", {}, `Workflow #${w.id} `, w.name ? `${w.name} ` : "", pill(w.state)),
    h("div", { class: "actions" }, actions, h("a", { class: "button", href: `#/tasks?workflow=${w.id}` }, "Its tasks")),
    h("dl", {}, [
      [h("dt", {}, "tasks"), h("dd", { id: "counts" }, `${w.total}: ${countsText(w.counts)}`)],
      [h("dt", {}, "created"), h("dd", {}, when(w.created_at))],
      [h("dt", {}, "finished"), h("dd", {}, when(w.finished_at))],
      w.schedule ? [h("dt", {}, "schedule"), h("dd", {}, h("a", { href: `#/schedules/${enc(w.schedule)}` }, w.schedule))] : null,
    ]),
    h("h2", {}, "Graph"),
    page.next_after
      ? h("p", { class: "muted" }, `The first ${nodes.length} of its ${w.total} tasks: too many to draw.`)
      : workflowGraph(nodes),
    h("h2", {}, "Tasks"),
    table(["name", "task", "state", "kind", "waits for"], rows, "No task left (retention removed them)."),
  ];
}

// ---- batches ---------------------------------------------------------------------------

async function batches(query) {
  const f = new URLSearchParams(query || "");
  const params = new URLSearchParams({ limit: "50" });
  if (f.get("before")) params.set("before", f.get("before"));
  const { batches, next_before } = await get(`/v1/batches?${params}`);
  const rows = batches.map((b) =>
    h(
      "tr",
      { "data-batch": b.id },
      h("td", {}, h("a", { href: `#/batches/${b.id}` }, `#${b.id}`)),
      h("td", {}, b.name || "—"),
      h("td", {}, pill(b.state)),
      h("td", { class: "num" }, b.total),
      h("td", { class: "small" }, countsText(b.counts)),
      h("td", {}, when(b.created_at)),
      h("td", {}, when(b.done_at)),
    ),
  );
  return [
    h("h1", {}, "Batches"),
    h("p", { class: "muted small" }, "Tasks that joined a batch; its callbacks run once, when it is closed and they have ended: sked batch open, or POST /v1/batches."),
    table(["id", "name", "state", "tasks", "by state", "created", "done"], rows, "No batch yet."),
    next_before ? h("a", { class: "button", href: `#/batches?before=${next_before}` }, "Older →") : null,
  ];
}

async function batch(id) {
  const b = await get(`/v1/batches/${enc(id)}`);
  const callback = (name, template, taskId) => {
    if (!template) return "—";
    if (taskId) return h("span", {}, `${template.kind} `, h("a", { href: `#/tasks/${taskId}`, "data-callback": name }, `#${taskId}`));
    return h("span", { "data-callback": name }, `${template.kind} (${b.state === "done" ? "not enqueued: not every task succeeded" : "waits for the batch"})`);
  };
  const actions = b.state === "open" ? [action("Close", () => post(`/v1/batches/${b.id}/close`), { name: "close", confirm: `Close batch #${b.id}? Its callbacks run once its tasks have ended.` })] : [];
  return [
    h("h1", {}, `Batch #${b.id} `, b.name ? `${b.name} ` : "", pill(b.state)),
    h("div", { class: "actions" }, actions),
    h("dl", {}, [
      [h("dt", {}, "tasks"), h("dd", { id: "counts" }, `${b.total}: ${countsText(b.counts)}`)],
      [h("dt", {}, "on success"), h("dd", {}, callback("on_success", b.on_success, b.on_success_task))],
      [h("dt", {}, "on complete"), h("dd", {}, callback("on_complete", b.on_complete, b.on_complete_task))],
      [h("dt", {}, "created"), h("dd", {}, when(b.created_at))],
      [h("dt", {}, "closed"), h("dd", {}, when(b.closed_at))],
      [h("dt", {}, "done"), h("dd", {}, when(b.done_at))],
    ]),
  ];
}

async function workers() {
  const { workers, more } = await get("/v1/workers?limit=1000");
  const rows = workers.map((w) =>
    h(
      "tr",
      { "data-worker": w.id, class: w.alive ? "" : "gone" },
      h("td", {}, w.id),
      h("td", {}, w.role),
      h("td", {}, w.alive ? pill("alive") : h("span", { class: "muted" }, w.stopped_at ? "stopped" : "not seen")),
      h("td", {}, w.queues.length ? w.queues.join(", ") : "all"),
      h("td", { class: "num" }, w.concurrency ?? "—"),
      h("td", { class: "num" }, w.running),
      h("td", {}, when(w.started_at)),
      h("td", {}, when(w.last_seen_at)),
    ),
  );
  return [
    h("h1", {}, "Workers and nodes"),
    h("p", { class: "muted small" }, "Seen in the last day. Alive: seen within the last 3 minutes and not stopped."),
    table(["id", "role", "status", "queues", "concurrency", "running", "started", "last seen"], rows, "No worker has been seen."),
    more ? h("p", { class: "muted small" }, `The ${workers.length} seen most recently.`) : null,
  ];
}

// ---- routing and live updates -----------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "schedules" && parts[1] === "new" && !parts[2]) return ["schedules", () => scheduleForm(null), true];
  if (parts[0] === "schedules" && parts[1] && parts[2] === "edit") return ["schedules", () => scheduleForm(parts[1]), true];
  if (parts[0] === "schedules" && parts[1]) return ["schedules", () => schedule(parts[1])];
  if (parts[0] === "schedules") return ["schedules", () => schedules(query)];
  if (parts[0] === "tasks" && parts[1]) return ["tasks", () => task(parts[1])];
  if (parts[0] === "tasks") return ["tasks", () => tasks(query)];
  if (parts[0] === "workers") return ["workers", workers];
  if (parts[0] === "workflows" && parts[1]) return ["workflows", () => workflow(parts[1])];
  if (parts[0] === "workflows") return ["workflows", () => workflows(query)];
  if (parts[0] === "batches" && parts[1]) return ["batches", () => batch(parts[1])];
  if (parts[0] === "batches") return ["batches", () => batches(query)];
  return ["overview", overview];
}

/// What the page's fields hold, to tell whether someone has changed one since it was drawn.
function fields(app) {
  return JSON.stringify([...app.querySelectorAll("input, select, textarea")].map((f) => (f.type === "checkbox" || f.type === "radio" ? f.checked : f.tagName === "SELECT" ? [...f.options].map((o) => o.selected) : f.value)));
}

/// Whether someone is filling in a field of the page: one has the focus, or one holds
/// something other than what the page was drawn with.
function editing(app) {
  const focused = document.activeElement;
  if (app.contains(focused) && /INPUT|SELECT|TEXTAREA/.test(focused.tagName)) return true;
  return app.dataset.fields !== undefined && app.dataset.fields !== fields(app);
}

async function refresh(force = false) {
  if (rendering) {
    // A navigation while a page is being fetched must not be lost: draw again after.
    again = again || force;
    return;
  }
  const app = document.getElementById("app");
  // Do not redraw under someone filling in a filter.
  if (!force && editing(app)) return;
  rendering = true;
  const hash = location.hash;
  const [nav, view, isForm] = route();
  // A form is not redrawn under its user by the live updates.
  if (!force && isForm && app.dataset.route === (hash.replace(/^#/, "") || "/")) {
    rendering = false;
    return;
  }
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === nav);
  // One /v1/cluster per refresh, shared by the header and the overview.
  const cluster = get("/v1/cluster");
  cluster.catch(() => {});
  try {
    const content = await view(cluster);
    // The address changed while this page was fetched: what was fetched is no longer wanted.
    // Someone may have started filling in a filter meanwhile: keep what they typed.
    if (location.hash === hash && (force || !editing(app))) {
      const scroll = window.scrollY;
      app.replaceChildren(...[content].flat(3).filter(Boolean));
      window.scrollTo(0, scroll);
      document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      app.dataset.loaded = nav;
      // The exact page shown, for whoever waits on it (the browser test).
      app.dataset.route = hash.replace(/^#/, "") || "/";
      app.dataset.fields = fields(app);
    } else if (location.hash !== hash) {
      again = true;
    }
  } catch (e) {
    const msg = e instanceof ApiError ? `${e.message} (${e.code})` : String(e.message || e);
    app.replaceChildren(h("div", { class: "problem" }, h("h1", {}, "Cannot show this page"), h("p", {}, msg)));
    delete app.dataset.route;
    delete app.dataset.fields;
  } finally {
    rendering = false;
  }
  try {
    const c = await cluster;
    document.getElementById("cluster").textContent = `${c.backend} · node ${c.node}${c.leader === c.node ? " (leader)" : ""}`;
  } catch {
    /* shown by the page itself */
  }
  if (again) {
    again = false;
    refresh(true);
  }
}

function schedule_refresh() {
  clearInterval(timer);
  if (live) timer = setInterval(() => refresh(false), REFRESH_MS);
}

document.getElementById("live-toggle").addEventListener("click", (ev) => {
  live = !live;
  ev.target.textContent = live ? "live" : "paused";
  ev.target.classList.toggle("off", !live);
  schedule_refresh();
});

window.addEventListener("hashchange", () => refresh(true));
refresh(true);
schedule_refresh();
