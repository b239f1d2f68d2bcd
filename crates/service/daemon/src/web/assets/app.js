// The web view of streamlined: the runs this session's user sees (server-sent events from
// /api/events, once a second), a run's graph (filters grouped by host, CPU and space; arcs
// as edges with their rates, and where an arc crosses spaces its channel's ring fill and
// readers; live rates), a node's counters, plots over the last minutes and options, and
// edits posted to /api/runs/N/edit: the daemon checks each as this user, as for the CLI.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const KEEP = 300; // samples kept per node (one a second: five minutes)
const NODE_W = 170, NODE_H = 52, COL_W = 260, ROW_H = 84;
const st = { runs: new Map(), hist: new Map(), ehist: new Map(), sel: null, node: null, sig: "", uid: null, refused: new Map() };

const $ = (id) => document.getElementById(id);
function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(x) {
  if (!isFinite(x)) return "0";
  const a = Math.abs(x);
  if (a >= 1e9) return (x / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (x / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  return a >= 100 ? x.toFixed(0) : x.toFixed(1);
}

// A node's blocks per second: what it passes on for a source, what it takes otherwise
// (as ps's rates are counted).
function nodeKey(run, label) { return run + "\u0000" + label; }
function record(doc) {
  for (const r of doc.runs) {
    for (const n of r.nodes) {
      const k = nodeKey(r.run, n.label);
      let h = st.hist.get(k);
      if (!h) st.hist.set(k, (h = []));
      h.push({ t: doc.t, bi: n.blocks_in, bo: n.blocks_out, yi: n.bytes_in, yo: n.bytes_out, d: n.drops, src: n.source });
      if (h.length > KEEP + 1) h.shift();
    }
    for (const e of r.edges || []) {
      const k = edgeKey(r.run, e.from, e.to);
      let h = st.ehist.get(k);
      if (!h) st.ehist.set(k, (h = []));
      h.push({ t: doc.t, b: e.blocks, y: e.bytes, fill: e.ring ? 100 * ringFill(e.ring) : null });
      if (h.length > KEEP + 1) h.shift();
    }
  }
}
function edgeKey(run, from, to) { return run + "\u0000" + from + "\u0000" + to; }
// An edge's blocks and bytes per second over the last two samples.
function edgeRate(run, from, to) {
  const h = st.ehist.get(edgeKey(run, from, to)) || [];
  const a = h[h.length - 2], b = h[h.length - 1];
  if (!a || b.t <= a.t) return { blocks: 0, bytes: 0 };
  const dt = b.t - a.t;
  return { blocks: Math.max(0, (b.b - a.b) / dt), bytes: Math.max(0, (b.y - a.y) / dt) };
}
// The edges of a run: the worker's arcs (counted, with rings), else the graph's.
function edgesOf(r) {
  if (r.edges && r.edges.length) return r.edges;
  return r.nodes.flatMap((n) => n.outputs.map((o) => ({ from: n.label, to: o, blocks: 0, bytes: 0, ring: null })));
}
function rates(run, label) {
  const h = st.hist.get(nodeKey(run, label)) || [];
  const out = [];
  for (let i = 1; i < h.length; i++) {
    const a = h[i - 1], b = h[i], dt = b.t - a.t;
    if (dt <= 0) continue;
    const blocks = b.src ? b.bo - a.bo : b.bi - a.bi;
    const bytes = b.src ? b.yo - a.yo : b.yi - a.yi;
    out.push({ t: b.t, blocks: Math.max(0, blocks / dt), bytes: Math.max(0, bytes / dt), out: Math.max(0, (b.bo - a.bo) / dt), drops: Math.max(0, (b.d - a.d) / dt) });
  }
  return out;
}
function lastRate(run, label) { const r = rates(run, label); return r.length ? r[r.length - 1] : { blocks: 0, bytes: 0, out: 0 }; }

function fromHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  st.sel = p.has("run") ? Number(p.get("run")) : st.sel;
  st.node = p.get("node") || null;
}
function toHash() {
  const p = new URLSearchParams();
  if (st.sel !== null) p.set("run", st.sel);
  if (st.node) p.set("node", st.node);
  history.replaceState(null, "", "#" + p.toString());
}

function drawNav() {
  const nav = $("runs");
  nav.replaceChildren();
  if (!st.runs.size) nav.append(el("p", { class: "hint", id: "no-runs" }, "No runs of yours."));
  for (const r of st.runs.values()) {
    const b = el("button", { class: "run" + (r.run === st.sel ? " sel" : ""), "data-run": r.run, type: "button" });
    b.append(el("b", {}, "run " + r.run), document.createTextNode(" \u00b7 " + r.user + " \u00b7 " + r.state + " \u00b7 " + fmt(r.rate) + " blk/s"));
    b.append(el("span", { class: "pipe", title: r.pipeline }, r.pipeline));
    b.onclick = () => { st.sel = r.run; st.node = null; st.sig = ""; toHash(); draw(); };
    nav.append(b);
  }
}

// Where a band's spaces run: the CPUs they last ran on (`sites`), pinned or not.
function cpusOf(r, sp) {
  const out = [];
  for (const one of sp.split(",")) {
    const s = (r.sites || []).find((x) => x.space === one);
    if (s && s.cpu !== null && s.cpu !== undefined && !out.some((o) => o.cpu === s.cpu)) out.push({ cpu: s.cpu, pinned: s.pinned });
  }
  return out.sort((a, b) => a.cpu - b.cpu);
}
// The group a band's spaces fall in: the CPUs they are pinned to; spaces the scheduler may
// move are grouped together (their last CPU is said on their band, updated in place).
function cpuName(cs) {
  if (!cs.length) return "cpu unknown";
  if (cs.some((c) => !c.pinned)) return "not pinned";
  return "cpu " + cs.map((c) => c.cpu).join(", ") + " (pinned)";
}
function lastCpu(r, sp) {
  const cs = cpusOf(r, sp);
  return cs.length && cs.some((c) => !c.pinned) ? "last ran on cpu " + cs.map((c) => c.cpu).join(", ") : "";
}
// Columns by depth (longest path from a source), wrapped into lines as wide as the view
// (a run of 100 filters in a chain reads as a paragraph, not a 25,000-pixel row); bands by
// space, grouped by the CPUs the spaces run on, all under the host.
function layout(r) {
  const K = Math.max(3, Math.floor((($("run").clientWidth || 1200) - 80) / COL_W));
  const by = new Map(r.nodes.map((n) => [n.label, n]));
  const depth = new Map();
  const visit = (n, seen) => {
    if (depth.has(n.label)) return depth.get(n.label);
    if (seen.has(n.label)) return 0;
    seen.add(n.label);
    let d = 0;
    for (const i of n.inputs) if (by.has(i)) d = Math.max(d, visit(by.get(i), seen) + 1);
    depth.set(n.label, d);
    return d;
  };
  for (const n of r.nodes) visit(n, new Set());
  const cpuKey = (sp) => cpuName(cpusOf(r, sp));
  const spaces = [...new Set(r.nodes.map((n) => n.space || "?"))]
    .sort((a, b) => { const ka = cpuKey(a), kb = cpuKey(b); return ka < kb ? -1 : ka > kb ? 1 : a < b ? -1 : a > b ? 1 : 0; });
  const rowsBy = new Map();
  for (const n of r.nodes) { const sp = n.space || "?"; if (!rowsBy.has(sp)) rowsBy.set(sp, []); rowsBy.get(sp).push(n); }
  const pos = new Map(), bands = [], cpus = [];
  let y = 30;
  for (const sp of spaces) {
    const key = cpuKey(sp);
    if (!cpus.length || cpus[cpus.length - 1].key !== key) { if (cpus.length) y += 10; cpus.push({ key, y, h: 0 }); y += 18; }
    const ns = rowsBy.get(sp);
    const first = Math.floor(Math.min(...ns.map((n) => depth.get(n.label) || 0)) / K);
    const cell = new Map(), stack = new Map(), tall = new Map();
    for (const n of ns) {
      const d = depth.get(n.label) || 0, line = Math.floor(d / K) - first, col = d % K, key = line + "," + col;
      const row = stack.get(key) || 0;
      stack.set(key, row + 1);
      tall.set(line, Math.max(tall.get(line) || 0, row + 1));
      cell.set(n.label, { line, col, row });
    }
    const lineY = [];
    let acc = 0;
    for (let l = 0; l <= Math.max(...tall.keys()); l++) { lineY.push(acc); acc += (tall.get(l) || 1) * ROW_H; }
    for (const n of ns) {
      const c = cell.get(n.label);
      pos.set(n.label, { x: 28 + c.col * COL_W, y: y + 34 + lineY[c.line] + c.row * ROW_H });
    }
    bands.push({ sp, y, h: 34 + acc });
    y += 34 + acc + 12;
    const c = cpus[cpus.length - 1];
    c.h = y - c.y - 4;
  }
  const w = 60 + Math.min(K, Math.max(0, ...depth.values()) + 1) * COL_W;
  return { pos, bands, cpus, w, h: y + 6 };
}
function spaceName(sp) {
  if (sp === "0") return "space 0 (local)";
  if (sp === "kernel") return "kernel (eBPF)";
  return sp.split(",").map((s) => /^p/.test(s) ? "process space " + s.slice(1) : "thread space " + s).join(" + ");
}
// An edge's words: its rate (a call within a space), and a channel's ring fill and readers.
function edgeRateText(run, e) {
  const r = edgeRate(run, e.from, e.to);
  return fmt(r.blocks) + "/s \u00b7 " + fmt(r.bytes) + "B/s" + (e.ring ? "" : " \u00b7 call");
}
function ringText(g) { return "ring " + Math.round(ringFill(g) * 100) + "% \u00b7 " + g.readers + (g.readers === 1 ? " reader" : " readers"); }
function edgeText(run, e) { return edgeRateText(run, e) + (e.ring ? " \u00b7 " + ringText(e.ring) : ""); }
function ringFill(g) {
  const f = (u, z) => (z ? Math.min(1, u / z) : 0);
  return Math.max(f(g.tags_used, g.tags_size), f(g.data_used, g.data_size));
}

function drawGraph(r) {
  const box = $("run");
  const edges = edgesOf(r);
  const sig = JSON.stringify([r.nodes.map((n) => [n.label, n.space, n.filter]), edges.map((e) => [e.from, e.to, !!e.ring]),
    [...new Set(r.nodes.map((n) => n.space || "?"))].map((sp) => [sp, cpuName(cpusOf(r, sp))])]);
  if (sig !== st.sig || !$("graph")) {
    st.sig = sig;
    box.replaceChildren(el("h2", { id: "run-title" }, "run " + r.run + " \u00b7 " + r.user + " \u00b7 " + r.state));
    box.append(el("p", { class: "mono", id: "run-pipeline" }, r.pipeline));
    const L = layout(r);
    const W = L.w + 200;
    const svg = el("svg:svg", { id: "graph", width: W, height: L.h, viewBox: `0 0 ${W} ${L.h}` });
    svg.append(el("svg:rect", { class: "host-box", x: 1, y: 1, width: W - 2, height: L.h - 2, rx: 8 }));
    svg.append(el("svg:text", { class: "host-name", x: 10, y: 18, id: "host-name" }, "host " + (r.host || "?")));
    for (const c of L.cpus) {
      svg.append(el("svg:rect", { class: "cpu-box", x: 6, y: c.y, width: W - 12, height: c.h, rx: 7 }));
      svg.append(el("svg:text", { class: "cpu-name", x: 14, y: c.y + 13 }, c.key));
    }
    for (const b of L.bands) {
      svg.append(el("svg:rect", { class: "space-band", x: 12, y: b.y, width: W - 24, height: b.h, rx: 6, "data-space": b.sp }));
      svg.append(el("svg:text", { class: "space-name", x: 20, y: b.y + 14 }, spaceName(b.sp)));
      svg.append(el("svg:text", { class: "space-cpu", x: 220, y: b.y + 14, "data-space": b.sp }, lastCpu(r, b.sp)));
    }
    // Edges under the nodes, their words over them (with a halo, to stay legible).
    const words = [];
    for (const e of edges) {
      const a = L.pos.get(e.from), b = L.pos.get(e.to);
      if (!a || !b) continue;
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2, mx = (x1 + x2) / 2, my = (y1 + y2) / 2;
      const cls = e.ring ? "edge ring" : "edge call";
      // Forward: an S from side to side; back to the start of the next line: a wide S.
      const c1 = x2 > x1 ? mx : x1 + 60, c2 = x2 > x1 ? mx : x2 - 60;
      svg.append(el("svg:path", { class: cls, d: `M${x1},${y1} C${c1},${y1} ${c2},${y2} ${x2},${y2}`, "data-from": e.from, "data-to": e.to }));
      // Its words in the gaps above and below the nodes it joins (a level edge), or at its middle.
      const level = y1 === y2 && x2 > x1;
      const ty = level ? y1 - NODE_H / 2 - 5 : my - 5, ry = level ? y1 + NODE_H / 2 + 13 : my + 13;
      words.push(el("svg:text", { class: "edge-rate", x: mx, y: ty, "text-anchor": "middle", "data-from": e.from, "data-to": e.to }, ""));
      if (e.ring) words.push(el("svg:text", { class: "edge-ring", x: mx, y: ry, "text-anchor": "middle", "data-from": e.from, "data-to": e.to }, ""));
    }
    for (const n of r.nodes) {
      const p = L.pos.get(n.label);
      const g = el("svg:g", { class: "node" + (n.source ? " source" : ""), "data-node": n.label, transform: `translate(${p.x},${p.y})`, tabindex: 0 });
      g.append(el("svg:rect", { width: NODE_W, height: NODE_H }));
      g.append(el("svg:text", { class: "label", x: 8, y: 16 }, n.label));
      g.append(el("svg:text", { class: "filter", x: 8, y: 31 }, n.filter.length > 26 ? n.filter.slice(0, 25) + "\u2026" : n.filter));
      g.append(el("svg:text", { class: "rate", x: 8, y: 46, "data-rate": 0 }, ""));
      g.append(el("svg:text", { class: "drops", x: 110, y: 46 }, ""));
      g.append(el("svg:text", { class: "refusal", x: 0, y: NODE_H + 13, fill: "#cf222e" }, ""));
      g.onclick = () => { st.node = n.label; toHash(); draw(); };
      svg.append(g);
    }
    svg.append(...words);
    box.append(svg);
  }
  $("run-title").textContent = "run " + r.run + " \u00b7 " + r.user + " \u00b7 " + r.state;
  $("run-pipeline").textContent = r.pipeline;
  const byLabel = new Map(r.nodes.map((n) => [n.label, n]));
  for (const g of $("graph").querySelectorAll("g.node")) {
    const label = g.dataset.node, n = byLabel.get(label);
    if (!n) continue;
    const rt = lastRate(r.run, label);
    const t = g.querySelector(".rate");
    t.textContent = fmt(rt.blocks) + " blk/s";
    t.setAttribute("data-rate", rt.blocks.toFixed(1));
    g.querySelector(".drops").textContent = n.drops ? n.drops + " dropped" : "";
    g.classList.toggle("sel", label === st.node);
    const why = st.refused.get(nodeKey(r.run, label));
    g.classList.toggle("refused", !!why);
    g.querySelector(".refusal").textContent = why ? "refused: " + (why.length > 60 ? why.slice(0, 59) + "\u2026" : why) : "";
  }
  for (const t of $("graph").querySelectorAll("text.space-cpu")) t.textContent = lastCpu(r, t.dataset.space);
  const byArc = new Map(edges.map((e) => [e.from + "\u0000" + e.to, e]));
  for (const t of $("graph").querySelectorAll("text.edge-rate")) {
    const e = byArc.get(t.dataset.from + "\u0000" + t.dataset.to);
    if (e) t.textContent = edgeRateText(r.run, e);
  }
  for (const t of $("graph").querySelectorAll("text.edge-ring")) {
    const e = byArc.get(t.dataset.from + "\u0000" + t.dataset.to);
    if (!e || !e.ring) continue;
    t.textContent = ringText(e.ring);
    t.setAttribute("data-fill", ringFill(e.ring).toFixed(3));
  }
  for (const p of $("graph").querySelectorAll("path.edge.ring")) {
    const e = byArc.get(p.dataset.from + "\u0000" + p.dataset.to);
    if (!e || !e.ring) continue;
    // Green to red as the ring fills (back-pressure ahead).
    const f = ringFill(e.ring);
    p.style.stroke = `hsl(${Math.round(130 - 130 * f)}, 60%, 42%)`;
  }
}

function plot(series, key, title, unit = "/s") {
  const W = 320, H = 70, s = series.slice(-KEEP);
  const svg = el("svg:svg", { class: "plot", width: W, height: H + 14 });
  const max = Math.max(1e-9, ...s.map((p) => p[key]));
  svg.append(el("svg:line", { class: "axis", x1: 0, y1: H, x2: W, y2: H }));
  const t1 = s.length ? s[s.length - 1].t : 0;
  const pts = s.map((p) => `${(W - (t1 - p.t) * (W / KEEP)).toFixed(1)},${(H - (p[key] / max) * (H - 4)).toFixed(1)}`).join(" ");
  svg.append(el("svg:polyline", { points: pts }));
  svg.append(el("svg:text", { x: 2, y: H + 12 }, title + " (max " + fmt(max) + unit + ", 5 min)"));
  return svg;
}

function drawPanel(r) {
  const panel = $("panel");
  const n = r && st.node ? r.nodes.find((x) => x.label === st.node) : null;
  panel.hidden = !n;
  if (!n) return;
  panel.dataset.node = n.label;
  $("panel-title").textContent = "run " + r.run + " \u00b7 " + n.label;
  $("panel-filter").textContent = n.filter + "   [space " + (n.space || "?") + "]";
  const rt = lastRate(r.run, n.label);
  const rows = [["blocks in", n.blocks_in], ["blocks out", n.blocks_out], ["bytes in", n.bytes_in], ["bytes out", n.bytes_out],
    ["drops", n.drops], ["blocks/s", fmt(rt.blocks)], ["bytes/s", fmt(rt.bytes)], ["classes", (n.classes || []).join(" ") || "-"],
    ["inputs", n.inputs.join(", ") || "-"], ["outputs", n.outputs.join(", ") || "-"]];
  for (const e of edgesOf(r).filter((e) => e.from === n.label)) {
    rows.push(["\u2192 " + e.to, edgeText(r.run, e) + (e.ring ? " \u00b7 " + e.ring.writer_waits + " waits for room" : "")]);
  }
  $("panel-counters").replaceChildren(...rows.map(([k, v]) => { const tr = el("tr"); tr.append(el("td", {}, k), el("td", { class: "n" }, String(v))); return tr; }));
  const series = rates(r.run, n.label);
  const rings = edgesOf(r).filter((e) => e.from === n.label && e.ring).map((e) => {
    const h = (st.ehist.get(edgeKey(r.run, e.from, e.to)) || []).filter((p) => p.fill !== null);
    const svg = plot(h, "fill", "ring to " + e.to + ", % full", "%");
    svg.classList.add("ring-plot");
    return svg;
  });
  $("plots").replaceChildren(plot(series, "blocks", "blocks/s"), plot(series, "bytes", "bytes/s"), plot(series, "drops", "drops/s"), ...rings);
  const base = "/api/runs/" + r.run + "/nodes/" + encodeURIComponent(n.label);
  $("sample-pcap").href = base + "/sample.pcap?secs=10&count=10000";
  if ($("sample-lines").dataset.node !== nodeKey(r.run, n.label)) {
    $("sample-lines").dataset.node = nodeKey(r.run, n.label);
    $("sample-lines").textContent = "";
  }
  $("panel-options").replaceChildren(...(n.options.length ? n.options : [["(none)", ""]]).map(([k, v]) => { const tr = el("tr"); tr.append(el("td", { class: "mono" }, k), el("td", { class: "mono" }, v)); return tr; }));
}

function draw() {
  drawNav();
  const r = st.sel !== null ? st.runs.get(st.sel) : null;
  if (r) drawGraph(r); else { $("run").replaceChildren(el("p", { class: "hint" }, st.sel !== null ? "Run " + st.sel + " is not one you can see (or it ended)." : "Choose a run.")); st.sig = ""; }
  drawPanel(r);
}

// The edit the form describes, as the protocol types it (proto::EditOp).
function editOp(kind, node, arg) {
  switch (kind) {
    case "insert-after": return { kind: "insert", at: "after", node, filter: arg };
    case "insert-before": return { kind: "insert", at: "before", node, filter: arg };
    case "replace": return { kind: "replace", node, filter: arg };
    case "branch": return { kind: "branch", node, filter: arg };
    case "remove": return { kind: "remove", node };
    case "set": return { kind: "set", node, options: arg.split(/\s+/).filter(Boolean).map((w) => { const i = w.indexOf("="); return i < 0 ? [w, ""] : [w.slice(0, i), w.slice(i + 1)]; }) };
  }
}
async function submitEdit(ev) {
  ev.preventDefault();
  const run = st.sel, node = st.node, res = $("edit-result");
  const op = editOp($("edit-kind").value, node, $("edit-arg").value.trim());
  res.className = ""; res.textContent = "asking the daemon\u2026";
  try {
    const r = await fetch("/api/runs/" + run + "/edit", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(op), credentials: "same-origin" });
    const body = await r.json();
    if (r.ok) {
      st.refused.delete(nodeKey(run, node));
      res.className = "applied";
      res.textContent = "applied: " + describe(body.applied.edit) + (body.applied.node ? " (node " + body.applied.node + ")" : "");
    } else {
      st.refused.set(nodeKey(run, node), body.code + ": " + body.message);
      res.className = "refused";
      res.textContent = "refused (" + body.code + "): " + body.message;
    }
  } catch (e) {
    res.className = "refused"; res.textContent = "no answer: " + e;
  }
  draw();
}
// A sample of what passes the chosen node, through its tap: tcpdump-style lines.
async function takeSample() {
  const run = st.sel, node = st.node, out = $("sample-lines");
  out.className = "mono"; out.textContent = "tapping " + node + "\u2026";
  try {
    const r = await fetch("/api/runs/" + run + "/nodes/" + encodeURIComponent(node) + "/sample?count=20&secs=3", { credentials: "same-origin" });
    if (!r.ok) { out.className = "mono refused"; out.textContent = "refused: " + (await r.text()); return; }
    const body = await r.json();
    out.dataset.packets = String(body.packets);
    out.textContent = body.lines.length ? body.lines.join("\n") : "nothing passed " + node + " in 3 s";
  } catch (e) {
    out.className = "mono refused"; out.textContent = "no answer: " + e;
  }
}
function describe(e) {
  const parts = [e.kind, e.at, e.node, e.filter, e.from, e.to].filter(Boolean);
  if (e.options) parts.push(e.options.map(([k, v]) => k + "=" + v).join(" "));
  return parts.join(" ");
}

function connect() {
  const es = new EventSource("/api/events");
  es.addEventListener("open", () => { $("conn").textContent = "live"; });
  es.addEventListener("error", () => { $("conn").textContent = "reconnecting"; });
  es.addEventListener("runs", (m) => {
    const doc = JSON.parse(m.data);
    st.uid = doc.uid;
    $("who").textContent = "uid " + doc.uid;
    st.runs = new Map(doc.runs.map((r) => [r.run, r]));
    if (st.sel === null && doc.runs.length) st.sel = doc.runs[0].run;
    record(doc);
    $("conn").textContent = "live \u00b7 " + new Date(doc.t * 1000).toLocaleTimeString();
    const t0 = performance.now();
    draw();
    // What an update costs the page (the browser test with 100 nodes prints it).
    document.body.dataset.drawMs = (performance.now() - t0).toFixed(1);
    document.body.dataset.updated = String(doc.t);
  });
}

async function loadFilters() {
  try {
    const fs = await (await fetch("/api/filters", { credentials: "same-origin" })).json();
    $("filters").replaceChildren(...fs.map(([name, syn]) => el("option", { value: name }, syn)));
  } catch (e) { /* the form works without suggestions */ }
}

fromHash();
window.addEventListener("hashchange", () => { fromHash(); st.sig = ""; draw(); });
$("edit-form").addEventListener("submit", submitEdit);
$("sample-take").addEventListener("click", takeSample);
loadFilters();
connect();
