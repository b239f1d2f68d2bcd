// The web view of streamlined: the runs this session's user sees (server-sent events from
// /api/events, once a second), a run's graph (filters grouped by space, arcs as edges,
// live rates), a node's counters, plots over the last minutes and options, and edits
// posted to /api/runs/N/edit: the daemon checks each as this user, as for the CLI.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const KEEP = 300; // samples kept per node (one a second: five minutes)
const NODE_W = 170, NODE_H = 52, COL_W = 215, ROW_H = 68;
const st = { runs: new Map(), hist: new Map(), sel: null, node: null, sig: "", uid: null, refused: new Map() };

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
  }
}
function rates(run, label) {
  const h = st.hist.get(nodeKey(run, label)) || [];
  const out = [];
  for (let i = 1; i < h.length; i++) {
    const a = h[i - 1], b = h[i], dt = b.t - a.t;
    if (dt <= 0) continue;
    const blocks = b.src ? b.bo - a.bo : b.bi - a.bi;
    const bytes = b.src ? b.yo - a.yo : b.yi - a.yi;
    out.push({ t: b.t, blocks: Math.max(0, blocks / dt), bytes: Math.max(0, bytes / dt), out: Math.max(0, (b.bo - a.bo) / dt) });
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

// Columns by depth (longest path from a source), bands by space.
function layout(r) {
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
  const spaces = [...new Set(r.nodes.map((n) => n.space || "?"))].sort();
  const pos = new Map(), bands = [];
  let y = 10;
  for (const sp of spaces) {
    const rows = new Map();
    let h = 0;
    for (const n of r.nodes.filter((n) => (n.space || "?") === sp)) {
      const d = depth.get(n.label) || 0, row = rows.get(d) || 0;
      rows.set(d, row + 1);
      h = Math.max(h, row + 1);
      pos.set(n.label, { x: 20 + d * COL_W, y: y + 22 + row * ROW_H });
    }
    bands.push({ sp, y, h: 30 + h * ROW_H });
    y += 30 + h * ROW_H + 12;
  }
  const w = 40 + (Math.max(0, ...depth.values()) + 1) * COL_W;
  return { pos, bands, w, h: y };
}
function spaceName(sp) { return sp === "0" ? "space 0 (local)" : /^p/.test(sp) ? "process space " + sp.slice(1) : "space " + sp; }

function drawGraph(r) {
  const box = $("run");
  const sig = JSON.stringify(r.nodes.map((n) => [n.label, n.inputs, n.outputs, n.space, n.filter]));
  if (sig !== st.sig || !$("graph")) {
    st.sig = sig;
    box.replaceChildren(el("h2", { id: "run-title" }, "run " + r.run + " \u00b7 " + r.user + " \u00b7 " + r.state));
    box.append(el("p", { class: "mono", id: "run-pipeline" }, r.pipeline));
    const L = layout(r);
    const svg = el("svg:svg", { id: "graph", width: L.w + 200, height: L.h, viewBox: `0 0 ${L.w + 200} ${L.h}` });
    for (const b of L.bands) {
      svg.append(el("svg:rect", { class: "space-band", x: 4, y: b.y, width: L.w + 190, height: b.h, rx: 6 }));
      svg.append(el("svg:text", { class: "space-name", x: 12, y: b.y + 14 }, spaceName(b.sp)));
    }
    for (const n of r.nodes) for (const o of n.outputs) {
      const a = L.pos.get(n.label), b = L.pos.get(o);
      if (!a || !b) continue;
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2, mx = (x1 + x2) / 2;
      svg.append(el("svg:path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "data-from": n.label, "data-to": o }));
      svg.append(el("svg:text", { class: "edge-rate", x: mx - 10, y: (y1 + y2) / 2 - 4, "data-from": n.label, "data-to": o }, ""));
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
    box.append(svg);
  }
  $("run-title").textContent = "run " + r.run + " \u00b7 " + r.user + " \u00b7 " + r.state;
  $("run-pipeline").textContent = r.pipeline;
  for (const g of $("graph").querySelectorAll("g.node")) {
    const label = g.dataset.node, n = r.nodes.find((x) => x.label === label);
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
  for (const t of $("graph").querySelectorAll("text.edge-rate")) t.textContent = fmt(lastRate(r.run, t.dataset.from).out) + "/s";
}

function plot(series, key, title) {
  const W = 320, H = 70, s = series.slice(-KEEP);
  const svg = el("svg:svg", { class: "plot", width: W, height: H + 14 });
  const max = Math.max(1e-9, ...s.map((p) => p[key]));
  svg.append(el("svg:line", { class: "axis", x1: 0, y1: H, x2: W, y2: H }));
  const t1 = s.length ? s[s.length - 1].t : 0;
  const pts = s.map((p) => `${(W - (t1 - p.t) * (W / KEEP)).toFixed(1)},${(H - (p[key] / max) * (H - 4)).toFixed(1)}`).join(" ");
  svg.append(el("svg:polyline", { points: pts }));
  svg.append(el("svg:text", { x: 2, y: H + 12 }, title + " (max " + fmt(max) + "/s, 5 min)"));
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
  $("panel-counters").replaceChildren(...rows.map(([k, v]) => { const tr = el("tr"); tr.append(el("td", {}, k), el("td", { class: "n" }, String(v))); return tr; }));
  const series = rates(r.run, n.label);
  $("plots").replaceChildren(plot(series, "blocks", "blocks/s"), plot(series, "bytes", "bytes/s"));
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
    document.body.dataset.updated = String(doc.t);
    draw();
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
