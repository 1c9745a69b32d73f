// Drives the dashboard of a running sked server in headless Chromium, as a person would:
// the schedules page, the failed task, a click on "Retry" and the state changing on screen
// without a reload, payloads shown as text (no script from a payload runs), a long payload cut
// with a way to see it whole. Prints what it checked; exits 1 on the first thing that is wrong.
//
// node dashboard.mjs URL FAILED_ID XSS_ID BIG_ID SCREENSHOT_DIR

import { chromium } from "playwright-core";

const [url, failedId, xssId, bigId, shots, waitingId, workflowId, batchId, memberId, stopsId, behindId] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

const garbled = [];
/** Notes the page if any of its text reads "[object …]": a value rendered the wrong way. */
async function notGarbled(page, name) {
  const text = await page.textContent("main");
  if (text.includes("[object ")) garbled.push(name);
}

/** Goes to a page of the dashboard and waits until that very page is drawn (not the last one). */
async function show(page, route) {
  await page.goto(`${url}/#${route}`);
  await page.waitForSelector(`main[data-route="${route}"]`);
}

function check(cond, what) {
  if (!cond) throw new Error(`not so: ${what}`);
  console.log(`ok: ${what}`);
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  // The machine's network is closed: Chromium must not try to reach Google's services.
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  const dialogs = [];
  const pageErrors = [];
  // Dialogs are declined unless a step says to accept the next one.
  let acceptNext = false;
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    if (acceptNext) {
      acceptNext = false;
      d.accept();
    } else {
      d.dismiss();
    }
  });
  /** Clicks `selector`, accepting the question it asks; the question. */
  async function confirmed(selector) {
    const before = dialogs.length;
    acceptNext = true;
    const asked = page.waitForEvent("dialog");
    await page.click(selector);
    await asked;
    return dialogs.splice(before).join("; ");
  }
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  const cspViolations = [];
  page.on("console", (m) => {
    if (m.type() === "error") cspViolations.push(m.text());
  });

  // Overview: counts, activity, workers, leader.
  await show(page, "/");
  check(await page.locator('tr[data-queue="default"]').count() === 1, "the overview lists the default queue");
  await notGarbled(page, "overview");
  const paced = (await page.locator('tr[data-queue="paced"]').textContent()) || "";
  check(paced.includes("1 of 1/h") && paced.includes("at its rate limit until"), `the paced queue shows its rate and why it waits: ${paced}`);
  const tenants = (await page.locator('tr[data-queue="tenants"]').textContent()) || "";
  check(tenants.includes("2, 5/s"), `the tenants queue shows its per-key limits: ${tenants}`);
  const ordered = (await page.locator('tr[data-queue="ordered"]').textContent()) || "";
  check(ordered.includes("1 strict (1 stopped)"), `the ordered queue shows its strict order and the key a dead task stops: ${ordered}`);
  await show(page, `/tasks/${behindId}`);
  const behind = (await page.locator("#held").textContent()) || "";
  check(behind.includes(`waits for #${stopsId} (dead`), `a task behind a dead one says which: ${behind}`);
  check(await page.locator(`#held a[href="#/tasks/${stopsId}"]`).count() === 1, "and links to it");
  await show(page, `/tasks/${waitingId}`);
  const held = (await page.locator("#held").textContent()) || "";
  check(held.includes("its queue is at its rate limit until") && !held.includes("[object"), `a waiting task's page says why it waits: ${held}`);
  await show(page, "/");
  check((await page.textContent("#leader")).trim().length > 0, "the overview names the leader");
  await page.waitForFunction(() => Number(document.querySelector('[data-total="dead"]')?.textContent.split(" ")[1]) >= 1);
  check(true, "the activity chart counts the dead task");
  // Per kind: the shell tasks ran (two died, the paced one succeeded): runs, failures, times.
  const shellKind = await page.locator('tr[data-kind="shell"]').textContent();
  check(/\d+(\.\d+)?\s*(ms|s)/.test(shellKind) && /%/.test(shellKind), `the overview shows figures per kind: ${shellKind}`);
  check(/67%/.test(shellKind), `two of the shell kind's three runs failed (the failing task, the ordered queue's dead one): ${shellKind}`);

  // Schedules: the blackboard.
  await page.click('a[data-nav="schedules"]');
  const nightly = page.locator('tr[data-schedule="nightly"]');
  await nightly.waitFor();
  const row = await nightly.textContent();
  check(row.includes("0 3 * * *") && row.includes("Europe/Berlin"), "the nightly schedule shows its spec and zone");
  // Times as the CLI shows them: in the schedule's zone, to the second, with the offset.
  check(/\d{4}-\d\d-\d\d 03:0\d:\d\d\+0[12]:00/.test(row), `the next fire is at 03:00 (and its jitter) Berlin time, to the second, with its offset: ${row}`);
  check(/at 03:00/i.test(row), "the nightly schedule's spec is also in words");
  check(await page.locator('tr[data-schedule="hourly"]').count() === 1, "the hourly schedule is listed");
  await show(page, "/schedules?prefix=night");
  await page.waitForSelector('[data-count="1"]');
  check(await page.locator('tr[data-schedule="hourly"]').count() === 0, "a search by name prefix lists only the schedules it matches, and counts them");
  await nightly.locator("a").first().click();
  await page.waitForSelector('tr[data-outcome="enqueued"]');
  await notGarbled(page, "schedule");
  check(true, "a schedule's page shows its occurrence history");
  const nominal = await page.locator('tr[data-outcome="enqueued"] time').first().textContent();
  check(/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+0[12]:00/.test(nominal), `the ledger shows seconds and the offset: ${nominal}`);
  const policies = await page.locator("dl").first().textContent();
  check(policies.includes("twice (a repeated time runs at both instants)"), "a schedule's page shows its DST policy");
  check(policies.includes("up to 5m"), "a schedule's page shows its jitter");
  if (shots) await page.screenshot({ path: `${shots}/dashboard-schedule.png`, fullPage: true });

  // Tasks: filter by state, find the failed one, retry it, watch it change.
  await show(page, "/tasks?state=dead");
  const failedRow = page.locator(`tr[data-task="${failedId}"]`);
  await failedRow.waitFor();
  await notGarbled(page, "tasks");
  check((await failedRow.getAttribute("data-state")) === "dead", `task #${failedId} is shown as dead`);
  const error = await failedRow.locator("td.error").textContent();
  check(error.includes("<b>boom</b>"), "its error message is shown as text, markup and all");
  await show(page, `/tasks/${failedId}`);
  await page.waitForSelector('h1 .pill[data-state="dead"]');
  await page.click('button[data-action="retry"]');
  // No reload: the page follows the task through its new attempt.
  await page.waitForSelector('h1 .pill[data-state="succeeded"]', { timeout: 20000 });
  check(true, `after "Retry" task #${failedId} is shown as succeeded, without a reload`);
  await notGarbled(page, "task");
  check((await page.locator("table tbody tr").count()) >= 2, "its page lists both attempts");
  // A success is not shown as a failure: its earlier error is history, not red, and running it
  // again is offered only with a question.
  const earlier = page.locator("#last-error");
  check((await earlier.getAttribute("class")) === "earlier" && (await earlier.textContent()).includes("boom"), "its earlier error is shown as history, not in red");
  check((await page.locator('button[data-action="retry"]').count()) === 0, "a succeeded task offers no Retry");
  const dialogsBefore = dialogs.length;
  await page.click('button[data-action="run-again"]'); // the page's dialog handler declines
  const asked = dialogs.splice(dialogsBefore).join("; ");
  check(asked.includes("succeeded. Run it again?"), `"Run again" asks first: ${asked}`);
  check((await page.locator('h1 .pill[data-state="succeeded"]').count()) === 1, "declined, the task stays succeeded");
  await show(page, "/tasks?state=succeeded");
  const doneRow = page.locator(`tr[data-task="${failedId}"]`);
  await doneRow.waitFor();
  check((await doneRow.locator("td.error").count()) === 0, "its row shows no error in red");
  check((await doneRow.locator('button[data-action="retry"]').count()) === 0, "its row offers no Retry");
  if (shots) await page.screenshot({ path: `${shots}/dashboard-task.png`, fullPage: true });

  // A payload that is markup and script stays text.
  await show(page, `/tasks/${xssId}`);
  const pre = page.locator('pre[data-json="payload"]');
  await pre.waitFor();
  const shown = await pre.textContent();
  check(shown.includes("<script>window.pwned=1</script>") && shown.includes("<img src=x onerror=alert(1)>"), "the XSS payload is shown as text");
  check(await page.evaluate(() => window.pwned === undefined), "its script did not run");
  check(await page.locator('main img[src="x"]').count() === 0, "its <img> was not made into an element");

  // A large payload is cut, with a button to see it whole.
  await show(page, `/tasks/${bigId}`);
  const big = page.locator('pre[data-json="payload"]');
  await big.waitFor();
  const before = (await big.textContent()).length;
  await page.click('button[data-action="show-all-payload"]');
  const after = (await big.textContent()).length;
  check(before <= 4000 && after > 20000, `a large payload is cut at ${before} characters and shown whole (${after}) on request`);

  // A workflow: listed, drawn with each task's state, a task linking back to it.
  await show(page, "/workflows");
  const flowRow = await page.textContent(`tr[data-workflow="${workflowId}"]`);
  check(flowRow.includes("nightly-etl") && flowRow.includes("active") && flowRow.includes("0/3"), `the workflows page lists the workflow: ${flowRow}`);
  await show(page, `/workflows/${workflowId}`);
  check((await page.locator("svg.graph [data-node]").count()) === 3, "its page draws its three tasks");
  check((await page.locator("svg.graph line.edge").count()) === 2, "and an arrow for each wait");
  const states = await page.$$eval("svg.graph [data-node]", (ns) => ns.map((n) => `${n.dataset.node}:${n.dataset.state}`).join(" "));
  check(states === "extract:available transform:waiting load:waiting", `each task is drawn in its state: ${states}`);
  await notGarbled(page, "workflow");
  if (shots) await page.screenshot({ path: `${shots}/dashboard-workflow.png`, fullPage: true });
  await page.click('svg.graph [data-node="transform"]');
  await page.waitForSelector('main[data-loaded="tasks"] a#workflow');
  check((await page.textContent("a#workflow")).includes("(transform)"), "a task of it names its workflow and links back");
  await page.click("a#workflow");
  await page.waitForSelector(`main[data-route="/workflows/${workflowId}"]`);
  const cancelAsked = await confirmed('button[data-action="cancel"]');
  check(cancelAsked.includes(`Cancel every task of workflow #${workflowId}`), `"Cancel" asks first: ${cancelAsked}`);
  await page.waitForSelector('h1 .pill[data-state="cancelled"]');
  check((await page.textContent("#counts")).includes("3 cancelled"), "cancelled from its page, every task of it is");

  // A batch: listed, its page with its counts and callback, a task of it linking back; closed
  // from its page (its task has not ended: the callback waits).
  await show(page, "/batches");
  const batchRow = await page.textContent(`tr[data-batch="${batchId}"]`);
  check(batchRow.includes("nightly-import") && batchRow.includes("open"), `the batches page lists the batch: ${batchRow}`);
  await show(page, `/tasks/${memberId}`);
  await page.click("a#batch");
  await page.waitForSelector(`main[data-route="/batches/${batchId}"]`);
  check((await page.textContent("#counts")).includes("1: 1 available"), "a task links to its batch, whose page counts it");
  const closeAsked = await confirmed('button[data-action="close"]');
  check(closeAsked.includes(`Close batch #${batchId}?`), `"Close" asks first: ${closeAsked}`);
  await page.waitForSelector('h1 .pill[data-state="closed"]');
  check((await page.textContent('[data-callback="on_complete"]')).includes("waits for the batch"), "closed, its callback waits for its task");
  await notGarbled(page, "batch");

  // Workers.
  await show(page, "/workers");
  await page.waitForSelector('main[data-loaded="workers"] tr[data-worker]');
  check(true, "the workers page lists the server's node and its executor");
  await notGarbled(page, "workers");

  // A live update that lands while someone fills in a filter keeps what they typed, even
  // once they have clicked away from the field: the update's request is held until then.
  await show(page, "/tasks");
  let letGo;
  const holding = new Promise((resolve) => (letGo = resolve));
  await page.route("**/v1/tasks?*", async (r) => {
    await holding;
    await r.continue();
  });
  const update = page.waitForRequest("**/v1/tasks?*");
  await update;
  await page.fill('form.filters input[name="queue"]', "bulk");
  await page.click("main h1");
  const landed = page.waitForResponse("**/v1/tasks?*");
  letGo();
  await landed;
  await page.unroute("**/v1/tasks?*");
  // The update is drawn (or not) once its reply is read; give it the time to.
  await page.waitForTimeout(300);
  check(
    (await page.inputValue('form.filters input[name="queue"]')) === "bulk",
    "a live update does not take away a filter being filled in",
  );

  // Search: the tasks of one tenant in one queue, by the form.
  await page.fill('form.filters input[name="queue"]', "bulk");
  await page.fill('form.filters input[name="key"]', "tenant-b");
  await page.click('button[data-action="search"]');
  await page.waitForSelector('main[data-route="/tasks?queue=bulk&key=tenant-b"]');
  check((await page.locator("tr[data-task]").count()) === 20, "a search by queue and key lists that tenant's 20 tasks");
  await notGarbled(page, "tasks search");
  if (shots) await page.screenshot({ path: `${shots}/dashboard-tasks-search.png`, fullPage: true });
  // Bulk cancel by the filter: counted, asked, done in batches.
  let question = await confirmed('button[data-action="bulk-cancel"]');
  check(question.includes("Cancel 20 waiting or scheduled or available or retrying or running tasks"), `"Cancel all" counts first and asks: ${question}`);
  await page.waitForFunction(() => document.getElementById("flash").textContent.includes("cancelled 20 tasks"));
  check(true, "the bulk cancel says what it did");
  await page.waitForSelector('tr[data-task][data-state="cancelled"]');
  check((await page.locator('tr[data-task][data-state="cancelled"]').count()) === 20, "the list shows the 20 cancelled, without a reload");
  // Declined, nothing happens; accepted, the cancelled ones are deleted.
  await show(page, "/tasks?state=cancelled&queue=bulk");
  const declinedAt = dialogs.length;
  const declined = page.waitForEvent("dialog");
  await page.click('button[data-action="bulk-delete"]'); // the question is declined
  await declined;
  await page.waitForSelector('button[data-action="bulk-delete"]:not([disabled])');
  check(dialogs.splice(declinedAt).join("").includes("Delete 20"), "a delete asks first");
  check((await page.locator("tr[data-task]").count()) === 20, "a declined delete deletes nothing");
  question = await confirmed('button[data-action="bulk-delete"]');
  check(question.includes("Delete 20 cancelled tasks"), `"Delete all" asks with the count: ${question}`);
  await page.waitForFunction(() => document.getElementById("flash").textContent.includes("deleted 20 tasks"));
  await page.waitForSelector("main p.empty");
  check(true, "the 20 are deleted and the list is empty");
  check((await page.locator('button[data-action="bulk-retry"]').count()) === 1, "a list of cancelled tasks offers Retry all, not Cancel all");
  check((await page.locator('button[data-action="bulk-cancel"]').count()) === 0, "…and no Cancel all");

  // Schedules: made, changed, refused when wrong, and deleted, in the browser.
  await show(page, "/schedules");
  await page.click('a[data-action="new-schedule"]');
  await page.waitForSelector('main[data-route="/schedules/new"] form[data-form="schedule"]');
  await page.fill('input[name="name"]', "made-here");
  await page.fill('input[name="spec"]', "0 4 * * *");
  await page.fill('input[name="tz"]', "Europe/Berlin");
  await page.fill('input[name="kind"]', "report");
  await page.fill('textarea[name="payload"]', '{"n": 1}');
  await page.click('button[data-action="save"]');
  await page.waitForSelector('main[data-route="/schedules/made-here"]');
  let made = await page.locator("dl").first().textContent();
  check(made.includes("0 4 * * *") && made.includes("Europe/Berlin"), "a schedule made in the browser is shown with its spec and zone");
  await page.click('a[data-action="edit"]');
  await page.waitForSelector('main[data-route="/schedules/made-here/edit"] form[data-form="schedule"]');
  check((await page.inputValue('textarea[name="payload"]')).includes('"n": 1'), "the edit form holds the schedule as it is");
  await page.fill('input[name="spec"]', "61 * * * *");
  await page.click('button[data-action="save"]');
  await page.waitForSelector("#form-problem:not([hidden])");
  const refused = await page.textContent("#form-problem");
  check(/61/.test(refused), `a bad spec is refused with the server's reason: ${refused}`);
  await page.fill('input[name="spec"]', "30 4 * * *");
  if (shots) await page.screenshot({ path: `${shots}/dashboard-schedule-edit.png`, fullPage: true });
  await page.click('button[data-action="save"]');
  await page.waitForSelector('main[data-route="/schedules/made-here"]');
  made = await page.locator("dl").first().textContent();
  check(made.includes("30 4 * * *") && made.includes("report on default"), "an edit changes the spec and keeps the task");

  await page.click('button[data-action="pause"]');
  await page.waitForSelector('h1 .tag');
  check((await page.textContent("h1")).includes("paused"), "a schedule is paused from its page");
  question = await confirmed('button[data-action="delete"]');
  check(question.includes("Delete schedule made-here?"), `"Delete" asks first: ${question}`);
  await page.waitForSelector('main[data-route="/schedules"]');
  check((await page.locator('tr[data-schedule="made-here"]').count()) === 0, "a deleted schedule leaves the list");

  // A schedule that starts a workflow: shown and edited as one.
  await show(page, "/schedules/etl-daily");
  await page.waitForSelector('main[data-route="/schedules/etl-daily"] dl');
  let etl = await page.locator("dl").first().textContent();
  check(etl.includes("etl: extract (shell); load (shell) after extract"), `a workflow schedule's page names its workflow's tasks: ${etl}`);
  await page.click('a[data-action="edit"]');
  await page.waitForSelector('main[data-route="/schedules/etl-daily/edit"] textarea[name="workflow"]');
  check((await page.inputValue('textarea[name="workflow"]')).includes('"after"'), "the edit form holds the schedule's workflow");
  check((await page.locator('input[name="kind"]').count()) === 0, "a workflow schedule's form asks for no task kind");
  await page.fill('input[name="spec"]', "0 5 * * *");
  await page.click('button[data-action="save"]');
  await page.waitForSelector('main[data-route="/schedules/etl-daily"]');
  etl = await page.locator("dl").first().textContent();
  check(etl.includes("0 5 * * *") && etl.includes("etl: extract (shell)"), "an edit of a workflow schedule keeps its workflow");

  // The overview, for the README.
  await show(page, "/");
  if (shots) await page.screenshot({ path: `${shots}/dashboard.png`, fullPage: true });

  check(!garbled.length, `no page showed an object where text belongs (${garbled.join(", ")})`);
  check(dialogs.length === 0, `no dialog opened (${dialogs.join("; ")})`);
  check(pageErrors.length === 0, `no script error on the pages (${pageErrors.join("; ")})`);
  check(cspViolations.filter((m) => /Content Security Policy/i.test(m)).length === 0, `no Content-Security-Policy violation (${cspViolations.join("; ")})`);
} catch (e) {
  failed = true;
  console.error(String(e && e.stack ? e.stack : e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
