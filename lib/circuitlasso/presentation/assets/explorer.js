// The circuit explorer: layers as columns, features as nodes sized by importance, a panel per
// feature. Reads the JSON of circuitlasso.presentation.explorer (schema circuitlasso.explorer/1).
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = { persistence: "#1f2328", merging: "#1f77b4", dropping: "#ff7f0e", other: "#8c959f" };
  const COLUMN = 190, ROW = 54, TOP = 36, LEFT = 70, R_MIN = 3, R_MAX = 20;

  const byId = new Map(data.nodes.map((n) => [n.id, n]));
  const parents = new Map(data.nodes.map((n) => [n.id, []]));
  const children = new Map(data.nodes.map((n) => [n.id, []]));
  for (const e of data.edges) {
    parents.get(e.target).push(e);
    children.get(e.source).push(e);
  }
  const maxCoef = Math.max(1e-12, ...data.edges.map((e) => Math.abs(e.coef)));
  const maxImportance = Math.max(1e-12, ...data.nodes.map((n) => n.importance));
  // per layer, the largest importance over the data set and over the listed prompts
  const layerMax = (values) => {
    const top = new Map();
    for (const n of data.nodes) top.set(n.layer, Math.max(top.get(n.layer) || 1e-12, values(n)));
    return top;
  };
  const datasetMax = layerMax((n) => n.importance);
  const promptMax = layerMax((n) => Math.max(0, ...data.prompts.map((p) => p.importance[n.id] || 0)));

  const state = { prompt: null, selected: null, minCoef: 0, minImportance: 0, search: "" };
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const svgEl = (tag, attrs) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  };
  const fmt = (x) => (Math.abs(x) >= 0.01 || x === 0 ? x.toFixed(3) : x.toExponential(2));

  // ---------------------------------------------------------------- layout
  const columns = new Map(data.layers.map((l) => [l, []]));
  for (const n of [...data.nodes].sort((a, b) => b.importance - a.importance)) columns.get(n.layer).push(n);
  const position = new Map();
  data.layers.forEach((layer, x) => {
    columns.get(layer).forEach((n, y) => position.set(n.id, { x: LEFT + x * COLUMN, y: TOP + 30 + y * ROW }));
  });
  const tallest = Math.max(1, ...[...columns.values()].map((c) => c.length));
  const svg = $("graph");
  svg.setAttribute("width", LEFT + data.layers.length * COLUMN);
  svg.setAttribute("height", TOP + 30 + tallest * ROW);

  const edgeLayer = svgEl("g", { class: "edges" });
  const nodeLayer = svgEl("g", { class: "nodes" });
  svg.append(edgeLayer, nodeLayer);
  data.layers.forEach((layer, x) => {
    const title = svgEl("text", { x: LEFT + x * COLUMN, y: TOP, "text-anchor": "middle", class: "layer-title" });
    title.textContent = `layer ${layer}`;
    svg.append(title);
  });

  const edgeViews = data.edges.map((e) => {
    const a = position.get(e.source), b = position.get(e.target), mid = (a.x + b.x) / 2;
    const path = svgEl("path", {
      class: "edge", "data-source": e.source, "data-target": e.target,
      d: `M${a.x},${a.y} C${mid},${a.y} ${mid},${b.y} ${b.x},${b.y}`,
      stroke: COLORS[e.type] || COLORS.other,
      "stroke-width": (0.8 + 3 * Math.abs(e.coef) / maxCoef).toFixed(2),
    });
    const tip = svgEl("title");
    tip.textContent = `${e.source} -> ${e.target}: coef ${fmt(e.coef)} (${e.type})`;
    path.append(tip);
    edgeLayer.append(path);
    return { edge: e, path };
  });

  const nodeViews = data.nodes.map((n) => {
    const { x, y } = position.get(n.id);
    const group = svgEl("g", { class: "node", "data-id": n.id, tabindex: 0, transform: `translate(${x},${y})` });
    if (n.readout) group.classList.add("readout");
    const circle = svgEl("circle", { r: R_MIN });
    const name = svgEl("text", { x: R_MAX + 4, y: -2 });
    name.textContent = n.id;
    const caption = svgEl("text", { x: R_MAX + 4, y: 11, class: "caption" });
    caption.textContent = n.label.length > 22 ? n.label.slice(0, 21) + "…" : n.label;
    const tip = svgEl("title");
    group.append(circle, name, caption, tip);
    group.addEventListener("mouseenter", () => { if (!state.selected) showPanel(n); });
    group.addEventListener("click", (event) => { event.stopPropagation(); select(n.id); });
    group.addEventListener("keydown", (event) => { if (event.key === "Enter") select(n.id); });
    nodeLayer.append(group);
    return { node: n, group, circle, tip };
  });
  svg.addEventListener("click", () => select(null));

  // ---------------------------------------------------------------- state -> view
  const importanceOf = (n) => (state.prompt === null ? n.importance : state.prompt.importance[n.id] || 0);
  const scaleOf = (n) => (state.prompt === null ? datasetMax : promptMax).get(n.layer);

  function visibleNodes() {
    const shown = new Set();
    for (const n of data.nodes) if (n.importance >= state.minImportance) shown.add(n.id);
    return shown;
  }

  function render() {
    const shown = visibleNodes();
    const query = state.search.trim().toLowerCase();
    const near = new Set();
    if (state.selected) {
      near.add(state.selected);
      for (const e of parents.get(state.selected)) near.add(e.source);
      for (const e of children.get(state.selected)) near.add(e.target);
    }
    for (const { node, group, circle, tip } of nodeViews) {
      const value = importanceOf(node);
      const r = value > 0 ? R_MIN + (R_MAX - R_MIN) * Math.sqrt(value / scaleOf(node)) : R_MIN;
      circle.setAttribute("r", r.toFixed(2));
      tip.textContent = `${node.id} (${node.label}): importance ${fmt(value)}`;
      group.style.display = shown.has(node.id) ? "" : "none";
      group.classList.toggle("inactive", state.prompt !== null && value === 0);
      group.classList.toggle("selected", node.id === state.selected);
      const matches = query !== "" && node.top_tokens.some(([token]) => token.toLowerCase().includes(query));
      group.classList.toggle("match", matches);
      group.classList.toggle("dim", (query !== "" && !matches) || (near.size > 0 && !near.has(node.id)));
    }
    for (const { edge, path } of edgeViews) {
      const visible = shown.has(edge.source) && shown.has(edge.target) && Math.abs(edge.coef) >= state.minCoef;
      path.style.display = visible ? "" : "none";
      const active = state.prompt === null || (state.prompt.importance[edge.source] || 0) > 0;
      path.classList.toggle("inactive", !active);
      const touches = edge.source === state.selected || edge.target === state.selected;
      path.classList.toggle("near", touches);
      path.classList.toggle("dim", near.size > 0 && !touches);
    }
    const text = $("prompt-text");
    text.hidden = state.prompt === null;
    if (state.prompt) text.textContent = `prompt ${state.prompt.prompt} (label ${state.prompt.label}): ${state.prompt.text}`;
    if (state.selected) showPanel(byId.get(state.selected));
  }

  function select(id) {
    state.selected = id;
    if (id === null) hint();
    render();
  }

  // ---------------------------------------------------------------- the panel
  function hint() {
    const panel = $("panel");
    panel.replaceChildren(el("p", { class: "hint" },
      "Hover over a feature to preview it, click it to keep its panel and walk to its parents and children."));
  }

  function relations(title, edges, other, cls) {
    const section = document.createDocumentFragment();
    section.append(el("h3", {}, `${title} (${edges.length})`));
    const list = el("ul", { class: cls });
    for (const e of [...edges].sort((a, b) => Math.abs(b.coef) - Math.abs(a.coef))) {
      const item = el("li", { "data-id": e[other] });
      const walk = el("button", { class: "walk", type: "button" }, e[other]);
      walk.addEventListener("click", () => select(e[other]));
      const type = el("span", { class: "edge-type", style: `background:${COLORS[e.type] || COLORS.other}` }, e.type);
      item.append(walk, ` ${byId.get(e[other]).label}: coef ${fmt(e.coef)} `, type);
      list.append(item);
    }
    if (!edges.length) list.append(el("li", { class: "hint" }, "none in the circuit"));
    section.append(list);
    return section;
  }

  function sentence(s, scale) {
    const p = el("p", { class: "sentence" });
    s.tokens.forEach((token, i) => {
      const v = s.values[i];
      const alpha = scale > 0 ? Math.max(0, v) / scale : 0;
      p.append(el("span", { class: "tok", title: fmt(v), style: `background:rgba(255,140,0,${alpha.toFixed(3)})` }, token), " ");
    });
    p.append(el("span", { class: "mean" }, `mean ${fmt(s.mean)} (prompt ${s.prompt})`));
    return p;
  }

  function showPanel(n) {
    const panel = $("panel");
    panel.replaceChildren();
    panel.append(el("h2", {}, n.id), el("p", { class: "label" }, n.label));
    const facts = `layer ${n.layer}, feature ${n.feature}, importance ${fmt(n.importance)}` +
      (state.prompt ? `, on this prompt ${fmt(importanceOf(n))}` : "");
    panel.append(el("p", { class: "hint" }, facts));
    if (n.readout) {
      const cols = data.readout.columns;
      panel.append(el("p", {}, n.readout.map((v, i) => `readout A_{L,y}[${cols[i]}] = ${fmt(v)}`).join(", ")));
    }
    panel.append(el("h3", {}, "top tokens"));
    const tokens = el("ul", { class: "top-tokens" });
    for (const [token, count] of n.top_tokens) tokens.append(el("li", {}, `${token} ×${count}`));
    panel.append(tokens);
    panel.append(el("h3", {}, "top activating sentences"));
    const scale = Math.max(0, ...n.sentences.flatMap((s) => s.values));
    const sentences = el("div", { class: "sentences" });
    for (const s of n.sentences) sentences.append(sentence(s, scale));
    panel.append(sentences);
    panel.append(relations("parents", parents.get(n.id), "source", "parents"));
    panel.append(relations("children", children.get(n.id), "target", "children"));
  }

  // ---------------------------------------------------------------- controls
  $("title").textContent = data.title;
  const mode = $("mode");
  data.prompts.forEach((p, i) => {
    const text = p.text.length > 60 ? p.text.slice(0, 59) + "…" : p.text;
    mode.append(el("option", { value: i }, `prompt ${p.prompt}: ${text}`));
  });
  mode.addEventListener("change", () => {
    state.prompt = mode.value === "" ? null : data.prompts[Number(mode.value)];
    render();
  });
  const slider = (id, top, key) => {
    const input = $(id), out = $(`${id}-value`);
    input.addEventListener("input", () => {
      state[key] = (top * Number(input.value)) / 100;
      out.textContent = fmt(state[key]);
      render();
    });
  };
  slider("min-coef", maxCoef, "minCoef");
  slider("min-importance", maxImportance, "minImportance");
  $("search").addEventListener("input", (event) => { state.search = event.target.value; render(); });

  const legend = $("legend");
  legend.append("edges:");
  for (const [type, color] of Object.entries(COLORS)) {
    legend.append(el("span", { class: "swatch", style: `background:${color}` }), type);
  }
  legend.append(" · node area: importance, relative to the largest of its layer" +
    " (per prompt: |A|·|z| on that prompt, relative to its layer's largest over the listed prompts)");

  hint();
  render();
})();
