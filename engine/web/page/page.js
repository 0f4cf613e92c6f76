// The app's page: polls /ui/app (every view from every worker, engine.web.views) and draws it. No library,
// no build step: the worker serves this file as it is. A hidden tab does not poll.
"use strict";

const POLL_MS = 2000;
const NODE_W = 200, NODE_H = 40, COLUMN_GAP = 80, ROW_GAP = 14, PAD = 10;
let drawnTopology = "";
let skew = 0;  // the worker's clock minus the browser's (seconds): ages are the worker's

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function svgEl(tag, attributes, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function row(cells) {
  const tr = el("tr");
  for (const value of cells) {
    if (value instanceof Node) tr.append(el("td", {}, value));
    else if (typeof value === "number") tr.append(el("td", {class: "num"}, value.toLocaleString()));
    else tr.append(el("td", {}, value === null || value === undefined ? "–" : value));
  }
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function ago(at) {
  const seconds = Math.max(0, Date.now() / 1000 + skew - at);
  if (seconds < 90) return `${seconds.toFixed(0)} s ago`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(0)} min ago`;
  return `${(seconds / 3600).toFixed(1)} h ago`;
}

function size(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

function list(numbers) {
  return numbers.length ? numbers.join(", ") : "–";
}

// -- the topology ---------------------------------------------------------------------------------------

function drawTopology(topology) {
  const key = JSON.stringify(topology);
  if (key === drawnTopology) return;  // (it changes only when an agent declares late)
  drawnTopology = key;
  const columns = [];
  for (const node of topology.nodes) (columns[node.rank] = columns[node.rank] || []).push(node);
  const position = {};
  const incoming = {};
  for (const edge of topology.edges) (incoming[edge.target] = incoming[edge.target] || []).push(edge.source);
  columns.forEach((nodes, rank) => {
    if (!nodes) return;
    // Each node near the middle of what flows into it (drawn already, in the columns to its left).
    const centre = (node) => {
      const ys = (incoming[node.id] || []).map((id) => position[id]).filter((p) => p && p.rank < rank)
        .map((p) => p.y);
      return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : Infinity;
    };
    nodes.sort((a, b) => centre(a) - centre(b) || a.name.localeCompare(b.name));
    nodes.forEach((node, index) => {
      position[node.id] = {x: PAD + rank * (NODE_W + COLUMN_GAP), y: PAD + index * (NODE_H + ROW_GAP), rank};
    });
  });
  const width = PAD * 2 + columns.length * (NODE_W + COLUMN_GAP) - COLUMN_GAP;
  const height = PAD * 2 + Math.max(...columns.map((c) => (c ? c.length : 0))) * (NODE_H + ROW_GAP);
  const svg = svgEl("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                            "aria-label": `the topology of ${topology.app}`});
  svg.append(svgEl("defs", {}, svgEl("marker", {id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4,
    markerWidth: 7, markerHeight: 7, orient: "auto"}, svgEl("path", {d: "M0,0 L8,4 L0,8 z", fill: "#9aa3b5"}))));
  for (const edge of topology.edges) {
    const from = position[edge.source], to = position[edge.target];
    if (!from || !to) continue;
    const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
    const bend = Math.max(40, Math.abs(x2 - x1) / 2);
    const back = to.rank <= from.rank;
    const path = svgEl("path", {d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`,
                                "marker-end": "url(#arrow)", class: back ? "back" : ""});
    path.append(svgEl("title", {}, edge.label));
    svg.append(path);
  }
  for (const node of topology.nodes) {
    const at = position[node.id];
    const group = svgEl("g", {class: `node ${node.kind}`, transform: `translate(${at.x},${at.y})`,
                              "data-id": node.id});
    group.append(svgEl("title", {}, `${node.kind} ${node.name}: ${node.detail}`));
    group.append(svgEl("rect", {width: NODE_W, height: NODE_H, rx: node.kind === "topic" ? 12 : 3}));
    const name = node.name.length > 30 ? node.name.slice(0, 29) + "…" : node.name;
    group.append(svgEl("text", {x: 8, y: 16}, name));
    group.append(svgEl("text", {x: 8, y: 31, class: "detail"}, `${node.kind} · ${node.detail}`));
    svg.append(group);
  }
  document.getElementById("topology").replaceChildren(svg);
}

// -- the group, partitions, tables, dead letters -----------------------------------------------------------

function lastChange(changes) {
  if (!changes.length) return "–";
  const c = changes[0];
  const parts = [];
  if (c.active_added.length) parts.push(`+active ${c.active_added.join(",")}`);
  if (c.active_removed.length) parts.push(`−active ${c.active_removed.join(",")}`);
  if (c.standby_added.length) parts.push(`+standby ${c.standby_added.join(",")}`);
  if (c.standby_removed.length) parts.push(`−standby ${c.standby_removed.join(",")}`);
  return `${ago(c.at)}: ${parts.join(" ")}`;
}

function drawGroup(group) {
  fill(document.querySelector("#group tbody"), group.workers.map((w) => row([
    w.worker, w.protocol, w.generation, list(w.active), list(w.standby), list(w.recovering), w.rebalances,
    lastChange(w.changes), w.loop_lag_p99_ms === null ? null : `${w.loop_lag_p99_ms.toFixed(1)} ms`,
    Object.values(w.agents).reduce((sum, agent) => sum + agent.events, 0),
  ])));
  const unreachable = Object.entries(group.unreachable);
  const warning = document.getElementById("unreachable");
  warning.hidden = !unreachable.length;
  warning.textContent = unreachable.map(([worker, why]) => `worker ${worker} did not answer: ${why}`).join("; ");
}

function sparkline(values) {
  const known = values.map((v, i) => [i, v]).filter(([, v]) => v !== null);
  const svg = svgEl("svg", {width: 80, height: 18, class: "spark"});
  if (known.length < 2) return svg;
  const top = Math.max(1, ...known.map(([, v]) => v));
  const points = known.map(([i, v]) => `${(i / (values.length - 1)) * 78 + 1},${17 - (v / top) * 16}`);
  svg.append(svgEl("polyline", {points: points.join(" ")}), svgEl("title", {}, `lag up to ${top}`));
  return svg;
}

function drawPartitions(view) {
  fill(document.querySelector("#partitions tbody"), view.partitions.map((p) => row([
    `${p.topic}[${p.partition}]`, p.worker, p.task, p.committed, p.position, p.lag, sparkline(p.lag_trend),
    p.records_per_s === null ? null : Math.round(p.records_per_s),
    p.waiting_s === null ? null : `${p.waiting_s.toFixed(0)} s`, p.paused.join(", ") || null,
  ])));
  const stuck = document.getElementById("stuck");
  stuck.hidden = !view.stuck.length;
  stuck.textContent = view.stuck.map((s) => `agent ${s.agent} (${s.worker}) has been inside ` +
    `${s.topic}[${s.partition}]@${s.offset} for ${s.seconds.toFixed(0)} s`).join("; ");
}

function drawTables(view) {
  fill(document.querySelector("#tables tbody"), view.tables.map((t) => row([
    t.name, t.kind, t.partitions,
    Object.entries(t.here).map(([worker, numbers]) => `${worker}: ${numbers.join(",")}`).join("; ") || null,
    Object.entries(t.standby).map(([worker, lags]) => `${worker}: ` + Object.entries(lags).map(
      ([partition, lag]) => `${partition} (${lag === null ? "not fetched yet" : `lag ${lag}`})`).join(", "))
      .join("; ") || null,
    t.keys, size(t.disk_bytes), t.windows_closed, t.late_events,
  ])));
  const restoring = Object.entries(view.recovery).filter(([, r]) => r.remaining > 0);
  document.getElementById("recovery").textContent = restoring.length
    ? restoring.map(([worker, r]) => `${worker} restoring: ${r.remaining.toLocaleString()} records left` +
      (r.records_per_s ? ` at ${Math.round(r.records_per_s).toLocaleString()}/s` : "")).join("; ")
    : "no restore under way";
}

function counts(title, entries, topics) {
  const parts = Object.entries(entries).map(([name, n]) =>
    `${name}: ${n.toLocaleString()}` + (topics && topics[name] ? ` (to ${topics[name]})` : ""));
  return el("p", {}, el("strong", {}, title), " ", parts.join(" · ") || "none");
}

function drawDeadLetters(view) {
  document.getElementById("dead-letter-counts").replaceChildren(
    counts("Dead letters:", view.counts, view.topics));
  document.getElementById("dead-letters").replaceChildren(...view.latest.map((d) => el("li", {},
    `${ago(d.at)} · agent ${d.agent} · ${d.topic}[${d.partition}]@${d.offset} · `, el("strong", {}, d.error),
    el("details", {}, el("summary", {}, "the record"),
       el("pre", {}, `key: ${d.key === null ? "null" : d.key}\nvalue: ${d.value === null ? "null" : d.value}`)))));
  document.getElementById("late-counts").replaceChildren(counts("Late events:", view.late.counts));
  document.getElementById("late").replaceChildren(...view.late.latest.map((e) => el("li", {},
    `${ago(e.at)} · table ${e.table} · ${e.topic}[${e.partition}]@${e.offset}, ` +
    `${e.behind_s.toFixed(3)} s behind stream time`)));
}

function render(views) {
  skew = views.time - Date.now() / 1000;
  document.getElementById("app").textContent = views.app;
  document.title = `${views.app} · engine`;
  const workers = views.group.workers;
  document.getElementById("summary").textContent =
    `${workers.length} worker${workers.length === 1 ? "" : "s"}` +
    (workers.length ? `, ${workers[0].protocol || "no"} group protocol` : "");
  drawTopology(views.topology);
  drawGroup(views.group);
  drawPartitions(views.partitions);
  drawTables(views.tables);
  drawDeadLetters(views["dead-letters"]);
}

function health(ok, text) {
  const dot = document.getElementById("health");
  dot.className = `dot ${ok ? "ok" : "failed"}`;
  dot.title = text;
  document.getElementById("updated").textContent = text;
}

async function poll() {
  if (!document.hidden) {
    try {
      const reply = await fetch("/ui/app", {cache: "no-store"});
      if (!reply.ok) throw new Error(`the worker answered ${reply.status}`);
      render(await reply.json());
      health(true, `updated ${new Date().toLocaleTimeString()}`);
    } catch (error) {
      health(false, `not updated: ${error.message}`);
    }
  }
  setTimeout(poll, POLL_MS);
}

poll();
