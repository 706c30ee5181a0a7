// osqueue dashboard: confirmations, select-all, and the overview's live numbers and charts.
// No framework and nothing from elsewhere; the charts are inline SVG drawn here.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f6feb", "#1a7f37", "#cf222e", "#9a6700", "#8250df", "#0a7ea4", "#bf3989", "#57606a"];

  // ------------------------------------------------------------------ forms

  document.addEventListener("submit", function (event) {
    const form = event.target;
    const button = event.submitter;
    const question = (button && button.dataset.confirm) || form.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.addEventListener("change", function (event) {
    const box = event.target;
    if (!box.dataset || !box.dataset.selectAll) return;
    document.querySelectorAll('input[type=checkbox][name="' + box.dataset.selectAll + '"]')
      .forEach(function (other) { other.checked = box.checked; });
  });

  // ------------------------------------------------------------------ formatting

  function num(v) {
    if (v === null || v === undefined) return "-";
    return Number.isInteger(v) ? v.toLocaleString("en-US") : v.toLocaleString("en-US", { maximumFractionDigits: 1 });
  }

  function age(s) {
    if (s === null || s === undefined) return "-";
    if (s < 120) return s.toFixed(1) + "s";
    if (s < 7200) return (s / 60).toFixed(1) + "m";
    return (s / 3600).toFixed(1) + "h";
  }

  function utc(t) {
    return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19);
  }

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ------------------------------------------------------------------ charts

  // The colour of the i-th series: the palette, then hues a golden angle apart
  // (16 queues get 16 colours a reader can tell apart in the legend).
  function color(i) {
    return i < COLORS.length ? COLORS[i] : "hsl(" + Math.round((i * 137.508) % 360) + ", 62%, 42%)";
  }

  // A tick label: as many decimals as the step needs (ticks are 1, 2, 5 x 10^n).
  function tickText(v, step) {
    const digits = step > 0 && step < 1 ? Math.min(6, Math.ceil(-Math.log10(step) - 1e-9)) : 0;
    return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  // The legend beside a chart: one entry per series, in HTML so it wraps (every
  // series listed, however many).
  function drawLegend(list, names) {
    if (!list || list.dataset.names === names.join("\u0000")) return;  // unchanged: keep it
    list.dataset.names = names.join("\u0000");
    while (list.firstChild) list.removeChild(list.firstChild);
    names.forEach(function (name, i) {
      const item = document.createElement("li");
      item.dataset.series = name;
      const swatch = el("svg", { width: 10, height: 10, "aria-hidden": "true" });
      swatch.appendChild(el("rect", { width: 10, height: 10, fill: color(i) }));
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(" " + name));
      list.appendChild(item);
    });
  }

  // Draw lines {name: [values]} over times (epoch seconds) into an <svg viewBox="0 0 600 200">,
  // on the y ticks given (round steps from 0; the last is the top of the axis).
  function drawChart(svg, times, lines, ticks) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 600, H = 200, left = 52, right = 10, top = 10, bottom = 24;
    const names = Object.keys(lines);
    drawLegend(document.getElementById(svg.id + "-legend"), names);
    if (times.length < 2 || names.length === 0) {
      svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" },
        "collecting samples…"));
      return;
    }
    const max = ticks[ticks.length - 1] || 1;
    const step = ticks.length > 1 ? ticks[1] - ticks[0] : 1;
    const t0 = times[0], t1 = times[times.length - 1], span = Math.max(t1 - t0, 1);
    const x = function (t) { return left + (W - left - right) * (t - t0) / span; };
    const y = function (v) { return top + (H - top - bottom) * (1 - v / max); };
    ticks.forEach(function (v) {
      const yy = y(v);
      svg.appendChild(el("line", { x1: left, x2: W - right, y1: yy, y2: yy, class: "axis" }));
      svg.appendChild(el("text", { x: left - 6, y: yy + 4, "text-anchor": "end", class: "tick" }, tickText(v, step)));
    });
    const clock = function (t) { return utc(t).slice(11, span < 600 ? 19 : 16); };
    svg.appendChild(el("text", { x: left, y: H - bottom + 16 }, clock(t0)));
    svg.appendChild(el("text", { x: W - right, y: H - bottom + 16, "text-anchor": "end" }, clock(t1) + " UTC"));
    names.forEach(function (name, i) {
      let d = "", pen = false;
      lines[name].forEach(function (v, j) {
        if (v === null) { pen = false; return; }
        d += (pen ? " L" : " M") + x(times[j]).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      });
      svg.appendChild(el("path", { d: d.trim(), class: "line", stroke: color(i), "data-series": name }));
    });
  }

  // ------------------------------------------------------------------ overview

  function setText(node, text) { if (node && node.textContent !== text) node.textContent = text; }

  function applyOverview(section, data) {
    const s = data.status;
    const totals = {
      depth: num(s.depth), claimed: num(s.claimed), dead: num(s.dead), oldest_age_s: age(s.oldest_age_s),
      pushed: num(s.pushed), completed: num(s.completed), failed: num(s.failed), version: num(s.version),
      read_at: utc(data.read_at),
    };
    if (s.broker) {
      totals.broker_epoch = String(s.broker.epoch);
      totals.broker_address = s.broker.address || "stopped";
      const left = s.broker.lease_remaining_s;
      totals.lease = left.toFixed(1) + "s " + (left > 0 ? "left" : "(expired)");
    }
    section.querySelectorAll("[data-total]").forEach(function (node) {
      if (node.dataset.total in totals) setText(node, totals[node.dataset.total]);
    });
    const rows = section.querySelectorAll("#queues tr[data-queue]");
    const shown = Array.prototype.map.call(rows, function (r) { return r.dataset.queue; }).sort();
    const now = Object.keys(s.queues).sort();
    if (shown.join("\u0000") !== now.join("\u0000")) { window.location.reload(); return; }
    rows.forEach(function (row) {
      const q = s.queues[row.dataset.queue];
      row.querySelectorAll("[data-field]").forEach(function (cell) {
        const f = cell.dataset.field, v = q[f];
        const text = f === "oldest_age_s" ? age(v) : num(v);
        const link = cell.querySelector("a");
        setText(link || cell, text);
      });
      const rates = (data.rates || {})[row.dataset.queue];
      row.querySelectorAll("[data-rate]").forEach(function (cell) {
        const v = rates ? rates[cell.dataset.rate] : undefined;
        setText(cell, v === undefined ? "-" : v.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }));
      });
    });
    const series = data.series;
    drawChart(document.getElementById("chart-depth"), series.times, series.depth, series.ticks.depth);
    drawChart(document.getElementById("chart-rate"), series.times, {
      pushed: series.rates.pushed, completed: series.rates.completed, failed: series.rates.failed,
    }, series.ticks.rates);
  }

  function poll(section) {
    const every = parseInt(section.dataset.pollMs, 10) || 3000;
    function tick() {
      fetch(section.dataset.api, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (data) { applyOverview(section, data); section.dataset.updated = String(Date.now()); })
        .catch(function () { section.dataset.stale = "1"; })
        .finally(function () { window.setTimeout(tick, every); });
    }
    tick();
  }

  document.addEventListener("DOMContentLoaded", function () {
    const section = document.getElementById("overview");
    if (section) poll(section);
  });
})();
