// The service map page: reads flows as server-sent events from api/flows, keeps the
// newest `keep` of them, lists them in the table (newest first) and draws the graph
// from those within `window` of the server's clock. Element ids and data attributes
// are stable (tests assert on them):
//   namespace groups  g.namespace[data-namespace="ns"] ("" for addresses outside pods)
//   nodes             g.node[data-node="ns/pod" | "service:ns/name" | "ip:10.0.0.1"]
//   edges             g.edge[data-edge="FROM->TO"][data-flows][data-dropped], class dropped
//   table rows        tr.flow[data-source][data-destination][data-verdict], class dropped
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COL_WIDTH = 230, COL_GAP = 90, NODE_W = 190, NODE_H = 34, NODE_GAP = 12, TOP = 34, MARGIN = 16;

const state = {
  keep: 1000,
  windowMs: 5 * 60 * 1000,
  clockOffset: 0, // server time - page time
  flows: [],      // newest last, at most keep
  drawPending: false,
};

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// nodeOf names a flow endpoint's node: its pod, or its address outside pods.
function nodeOf(ep) {
  if (ep && ep.pod) return { id: ep.namespace + "/" + ep.pod, kind: "pod", ns: ep.namespace, label: ep.pod };
  const ip = (ep && ep.ip) || "unknown";
  return { id: "ip:" + ip, kind: "ip", ns: "", label: ip };
}

function serviceNode(svc) {
  const i = svc.indexOf("/");
  const ns = i < 0 ? "" : svc.slice(0, i);
  return { id: "service:" + svc, kind: "service", ns: ns, label: i < 0 ? svc : svc.slice(i + 1) };
}

// hops are the graph's steps of one flow: through its Service when it had one.
function hopsOf(f) {
  const src = nodeOf(f.source), dst = nodeOf(f.destination);
  if (!f.service) return [[src, dst]];
  const svc = serviceNode(f.service);
  return [[src, svc], [svc, dst]];
}

// aggregate folds the recent flows into nodes and one edge per source -> destination.
// Replies are left out: they belong to the edge of the request.
function aggregate(flows, since) {
  const nodes = new Map(), edges = new Map();
  for (const f of flows) {
    if (f.type === "LOST" || f.isReply || Date.parse(f.time) < since) continue;
    const dropped = f.verdict === "DROPPED";
    for (const [a, b] of hopsOf(f)) {
      nodes.set(a.id, a);
      nodes.set(b.id, b);
      const key = a.id + "->" + b.id;
      let e = edges.get(key);
      if (!e) {
        e = { key: key, from: a.id, to: b.id, flows: 0, dropped: 0, reasons: new Set(), ports: new Set() };
        edges.set(key, e);
      }
      e.flows++;
      if (dropped) {
        e.dropped++;
        if (f.dropReason && e.reasons.size < 5) e.reasons.add(f.dropReason);
      }
      if (f.dstPort && e.ports.size < 5) e.ports.add((f.protocol || "") + "/" + f.dstPort);
    }
  }
  return { nodes: nodes, edges: edges };
}

const KIND_ORDER = { service: 0, pod: 1, ip: 2 };

// layout puts each namespace in a column (sorted, addresses outside pods last) and
// its Services, pods and addresses down the column in name order.
function layout(nodes) {
  const groups = new Map();
  for (const n of nodes.values()) {
    if (!groups.has(n.ns)) groups.set(n.ns, []);
    groups.get(n.ns).push(n);
  }
  const names = [...groups.keys()].sort((a, b) => (a === "") - (b === "") || a.localeCompare(b));
  const cols = [], pos = new Map();
  names.forEach((ns, i) => {
    const members = groups.get(ns).sort((a, b) => KIND_ORDER[a.kind] - KIND_ORDER[b.kind] || a.label.localeCompare(b.label));
    const x = MARGIN + i * (COL_WIDTH + COL_GAP);
    members.forEach((n, j) => {
      pos.set(n.id, { x: x + (COL_WIDTH - NODE_W) / 2, y: MARGIN + TOP + j * (NODE_H + NODE_GAP) });
    });
    cols.push({ ns: ns, x: x, height: TOP + members.length * (NODE_H + NODE_GAP) + 4 });
  });
  return { cols: cols, pos: pos };
}

function drawNamespaces(g, cols) {
  for (const c of cols) {
    const grp = el("g", { class: "namespace" + (c.ns === "" ? " outside" : ""), "data-namespace": c.ns });
    grp.appendChild(el("rect", { x: c.x, y: MARGIN, width: COL_WIDTH, height: c.height }));
    grp.appendChild(el("text", { x: c.x + 10, y: MARGIN + 20 }, c.ns === "" ? "outside pods" : c.ns));
    g.appendChild(grp);
  }
}

function drawNodes(g, nodes, pos) {
  for (const n of nodes.values()) {
    const p = pos.get(n.id);
    const grp = el("g", { class: "node " + n.kind, "data-node": n.id, "data-kind": n.kind, "data-namespace": n.ns });
    grp.appendChild(el("title", {}, n.id));
    grp.appendChild(el("rect", { x: p.x, y: p.y, width: NODE_W, height: NODE_H }));
    grp.appendChild(el("text", { x: p.x + 8, y: p.y + 14, class: "kind" }, n.kind === "ip" ? "address" : n.kind));
    grp.appendChild(el("text", { x: p.x + 8, y: p.y + 28 }, n.label));
    g.appendChild(grp);
  }
}

// edgePath runs from the right side of a to the left side of b, or loops out to the
// right when both sit in one column.
function edgePath(a, b) {
  const ay = a.y + NODE_H / 2, by = b.y + NODE_H / 2;
  if (a.x === b.x) {
    const x = a.x + NODE_W, bend = 40 + Math.min(60, Math.abs(by - ay) / 4);
    return { d: `M ${x} ${ay} C ${x + bend} ${ay}, ${x + bend} ${by}, ${x} ${by}`, lx: x + bend * 0.75 + 8, ly: (ay + by) / 2 };
  }
  const forward = b.x > a.x;
  const x1 = forward ? a.x + NODE_W : a.x, x2 = forward ? b.x : b.x + NODE_W;
  const dx = (x2 - x1) / 2;
  return { d: `M ${x1} ${ay} C ${x1 + dx} ${ay}, ${x2 - dx} ${by}, ${x2} ${by}`, lx: (x1 + x2) / 2, ly: (ay + by) / 2 - 4 };
}

function drawEdges(g, edges, pos) {
  for (const e of edges.values()) {
    const dropped = e.dropped > 0;
    const grp = el("g", {
      class: "edge" + (dropped ? " dropped" : ""), "data-edge": e.key,
      "data-from": e.from, "data-to": e.to, "data-flows": e.flows, "data-dropped": e.dropped,
    });
    const p = edgePath(pos.get(e.from), pos.get(e.to));
    let title = `${e.from} -> ${e.to}: ${e.flows} flows`;
    if (dropped) title += `, ${e.dropped} dropped (${[...e.reasons].join(", ")})`;
    if (e.ports.size) title += ` [${[...e.ports].join(", ")}]`;
    grp.appendChild(el("title", {}, title));
    grp.appendChild(el("path", { d: p.d, "marker-end": dropped ? "url(#arrow-dropped)" : "url(#arrow)" }));
    grp.appendChild(el("text", { x: p.lx, y: p.ly }, !dropped ? String(e.flows) : e.dropped === e.flows ? `${e.flows} dropped` : `${e.flows} (${e.dropped} dropped)`));
    g.appendChild(grp);
  }
}

function drawGraph() {
  state.drawPending = false;
  const since = Date.now() + state.clockOffset - state.windowMs;
  const { nodes, edges } = aggregate(state.flows, since);
  const { cols, pos } = layout(nodes);
  const svg = document.getElementById("graph");
  const parts = ["namespaces", "edges", "nodes"].map((id) => {
    const g = document.getElementById(id);
    g.replaceChildren();
    return g;
  });
  drawNamespaces(parts[0], cols);
  drawEdges(parts[1], edges, pos);
  drawNodes(parts[2], nodes, pos);
  const height = Math.max(120, ...cols.map((c) => c.height + 2 * MARGIN));
  svg.setAttribute("width", Math.max(400, MARGIN * 2 + cols.length * (COL_WIDTH + COL_GAP)));
  svg.setAttribute("height", height);
  document.getElementById("empty").hidden = nodes.size > 0;
  document.getElementById("summary").textContent =
    `${nodes.size} nodes, ${edges.size} edges from the last ${state.windowMs / 1000}s; ${state.flows.length} flows kept (at most ${state.keep})`;
}

function scheduleDraw() {
  if (state.drawPending) return;
  state.drawPending = true;
  requestAnimationFrame(drawGraph);
}

function endpointText(ep, port) {
  const who = ep && ep.pod ? ep.namespace + "/" + ep.pod : (ep && ep.ip) || "";
  return port ? `${who}:${port}` : who;
}

function details(f) {
  if (f.type === "LOST") return `${f.lost} flows lost (this page or the node fell behind)`;
  const parts = [];
  if (f.dropReason) parts.push(f.dropReason);
  if (f.tcpFlags) parts.push(Object.keys(f.tcpFlags).filter((k) => f.tcpFlags[k]).join(",").toUpperCase());
  if (f.dns) parts.push(`dns ${f.dns.response ? "response" : "query"} ${f.dns.query} ${f.dns.qtype}${f.dns.rcode ? " " + f.dns.rcode : ""}`);
  if (f.isReply) parts.push("reply");
  if (f.direction) parts.push(f.direction.toLowerCase());
  return parts.join(" ");
}

function tableRow(f) {
  const tr = document.createElement("tr");
  const lost = f.type === "LOST", dropped = f.verdict === "DROPPED";
  tr.className = "flow" + (dropped ? " dropped" : "") + (lost ? " lost" : "");
  tr.dataset.verdict = f.verdict || "";
  tr.dataset.source = lost ? "" : nodeOf(f.source).id;
  tr.dataset.destination = lost ? "" : nodeOf(f.destination).id;
  const t = new Date(f.time);
  const cells = [
    ["time", t.toLocaleTimeString(undefined, { hour12: false }) + "." + String(t.getMilliseconds()).padStart(3, "0")],
    ["node", f.node || ""],
    ["source", lost ? "" : endpointText(f.source, f.srcPort)],
    ["destination", lost ? "" : endpointText(f.destination, f.dstPort)],
    ["service", f.service || ""],
    ["protocol", f.protocol || ""],
    ["verdict", lost ? "LOST" : f.verdict || ""],
    ["details", details(f)],
  ];
  for (const [cls, text] of cells) {
    const td = document.createElement("td");
    td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
  }
  return tr;
}

function addFlow(f) {
  state.flows.push(f);
  const rows = document.getElementById("flow-rows");
  rows.prepend(tableRow(f));
  while (state.flows.length > state.keep) state.flows.shift();
  while (rows.rows.length > state.keep) rows.lastElementChild.remove();
  scheduleDraw();
}

function setStatus(s, text) {
  const e = document.getElementById("status");
  e.dataset.state = s;
  e.textContent = text;
}

function connect() {
  const es = new EventSource("api/flows" + location.search);
  es.addEventListener("hello", (ev) => {
    const h = JSON.parse(ev.data);
    state.keep = h.keep;
    state.windowMs = h.windowSeconds * 1000;
    state.clockOffset = Date.parse(h.serverTime) - Date.now();
    // A reconnected stream sends its history again: start over.
    state.flows = [];
    document.getElementById("flow-rows").replaceChildren();
    document.getElementById("failure").hidden = true;
    setStatus("live", "live" + (h.namespaces ? " (namespaces " + h.namespaces.join(", ") + ")" : ""));
    scheduleDraw();
  });
  es.addEventListener("flow", (ev) => addFlow(JSON.parse(ev.data)));
  es.addEventListener("failure", (ev) => {
    const box = document.getElementById("failure");
    box.textContent = "The flow source failed: " + JSON.parse(ev.data).error + " (retrying)";
    box.hidden = false;
  });
  es.onerror = () => setStatus("error", "disconnected, retrying…");
}

connect();
// The window moves on even when no flow arrives.
setInterval(scheduleDraw, 5000);
