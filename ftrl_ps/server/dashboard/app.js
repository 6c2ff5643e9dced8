// ftrl-ps dashboard: polls /v1/dashboard every second and draws cards, two
// SVG charts and the worker and shard tables. Plain JS, no libraries.
// With a token set on the servers, the feed answers 401: the page asks for
// the token, keeps it in sessionStorage and sends it only in the
// Authorization header (never in a URL).
"use strict";

(function () {
  const POLL_MS = 1000;
  const TOKEN_KEY = "ftrl-ps-token";
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  let previous = null;        // last feed, for per-worker and per-shard rates
  let timer = null;

  function fmt(n, digits) {
    if (n === null || n === undefined || Number.isNaN(n)) return "–";
    const a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(2) + "G";
    if (a >= 1e6) return (n / 1e6).toFixed(2) + "M";
    if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return n.toFixed(digits === undefined ? 0 : digits);
  }

  function duration(s) {
    if (s < 60) return s.toFixed(0) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  function setStatus(text, bad) {
    const el = $("status");
    el.textContent = text;
    el.className = bad ? "status bad" : "status";
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function rate(now, before, key, dt) {
    if (!before || !(dt > 0)) return null;
    return Math.max(0, (now[key] - before[key]) / dt);
  }

  function drawChart(svg, xs, ys, color, digits) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 600, H = 200, L = 48, B = 18, T = 8, R = 8;
    const pts = [];
    for (let i = 0; i < xs.length; i++) {
      if (ys[i] !== null && ys[i] !== undefined && Number.isFinite(ys[i])) pts.push([xs[i], ys[i]]);
    }
    const axis = document.createElementNS(SVG, "path");
    axis.setAttribute("class", "axis");
    axis.setAttribute("d", `M${L},${T} V${H - B} H${W - R}`);
    axis.setAttribute("fill", "none");
    svg.appendChild(axis);
    svg.dataset.points = String(pts.length);
    if (pts.length === 0) return;
    const x0 = pts[0][0], x1 = Math.max(pts[pts.length - 1][0], x0 + 1);
    let y0 = Math.min(...pts.map((p) => p[1])), y1 = Math.max(...pts.map((p) => p[1]));
    if (y1 - y0 < 1e-9) { y0 -= 0.5 * (Math.abs(y0) || 1); y1 += 0.5 * (Math.abs(y1) || 1); }
    if (y0 > 0 && y0 < 0.3 * y1) y0 = 0;
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - B - T);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    svg.appendChild(line);
    const last = pts[pts.length - 1];
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("cx", sx(last[0]).toFixed(1));
    dot.setAttribute("cy", sy(last[1]).toFixed(1));
    dot.setAttribute("r", "3");
    dot.setAttribute("fill", color);
    svg.appendChild(dot);
    const labels = [[y1, T + 10], [y0, H - B]];
    for (const [v, y] of labels) {
      const t = document.createElementNS(SVG, "text");
      t.setAttribute("x", "4");
      t.setAttribute("y", String(y));
      t.textContent = digits ? v.toFixed(digits) : fmt(v);
      svg.appendChild(t);
    }
    const span = document.createElementNS(SVG, "text");
    span.setAttribute("x", String(W - R - 60));
    span.setAttribute("y", String(H - 4));
    span.textContent = duration(x1 - x0);
    svg.appendChild(span);
  }

  function render(d) {
    const c = d.cluster;
    $("c-rows").textContent = fmt(c.rows);
    $("c-rate").textContent = fmt(c.rows_per_second);
    $("c-loss").textContent = c.progressive_logloss === null ? "–" : c.progressive_logloss.toFixed(5);
    $("c-clock").textContent = c.min_clock === null ? "–" : c.min_clock + ".." + c.max_clock;
    $("c-stale").textContent = c.gap + " / " + (c.staleness === null ? "∞" : c.staleness);
    const states = Object.entries(c.states).map(([k, v]) => v + " " + k).join(", ");
    $("c-workers").textContent = states || "none yet";
    $("c-restarts").textContent = String(c.restarts);
    $("c-uptime").textContent = duration(d.uptime_s);

    const h = d.history;
    const xs = h.map((p) => p.t);
    drawChart($("chart-rate"), xs, h.map((p) => p.rows_per_second), "#2563eb", 0);
    drawChart($("chart-loss"), xs, h.map((p) => p.logloss), "#d97706", 4);

    const dt = previous ? d.time - previous.time : 0;
    const before = new Map((previous ? previous.workers : []).map((w) => [w.worker_id, w]));
    const wbody = $("workers").tBodies[0];
    wbody.replaceChildren();
    for (const w of d.workers) {
      const tr = document.createElement("tr");
      const r = rate(w, before.get(w.worker_id), "rows", dt);
      cell(tr, String(w.index));
      cell(tr, w.state, w.state);
      cell(tr, String(w.clock));
      cell(tr, fmt(w.rows));
      cell(tr, fmt(w.state === "live" && r !== null ? r : w.rows_per_second));
      cell(tr, w.progressive_logloss === null ? "–" : w.progressive_logloss.toFixed(5));
      cell(tr, w.wait_seconds.toFixed(2));
      cell(tr, w.idle_seconds.toFixed(2));
      cell(tr, w.straggle_seconds === null || w.straggle_seconds === undefined
        ? "–" : w.straggle_seconds.toFixed(2));
      cell(tr, w.seconds_since_seen.toFixed(1) + " s ago");
      wbody.appendChild(tr);
    }
    $("workers-note").textContent = d.clock_authority
      ? (c.missing.length ? "not registered yet: " + c.missing.join(", ") : "")
      : "workers are listed on shard 0's dashboard";

    const sbefore = new Map((previous ? previous.shards : []).map((s) => [s.index, s]));
    const sbody = $("shards").tBodies[0];
    sbody.replaceChildren();
    for (const s of d.shards) {
      const tr = document.createElement("tr");
      cell(tr, String(s.index));
      if (!s.up) {
        cell(tr, "–"); cell(tr, "–"); cell(tr, "–"); cell(tr, "–"); cell(tr, "–");
        cell(tr, "–"); cell(tr, "–"); cell(tr, "–");
        cell(tr, "down", "dead");
        tr.title = s.error || "";
        sbody.appendChild(tr);
        continue;
      }
      const p = sbefore.get(s.index);
      const load = p && p.up ? rate({ k: s.keys_pushed + s.keys_pulled }, { k: p.keys_pushed + p.keys_pulled }, "k", dt) : null;
      cell(tr, fmt(s.end - s.begin));
      cell(tr, fmt(s.keys_with_state));
      cell(tr, fmt(s.pushes));
      cell(tr, fmt(s.pulls));
      cell(tr, fmt(s.keys_pushed));
      cell(tr, fmt(s.keys_pulled));
      cell(tr, fmt(load));
      cell(tr, fmt(s.duplicate_pushes));
      cell(tr, "up", "live");
      sbody.appendChild(tr);
    }
    $("shards-note").textContent = d.peers_known ? ""
      : "other shards unknown: start shard 0 with --peers URL,... to list them here";
    $("footer").textContent = "ftrl-ps " + d.version + " · shard " + d.shard_index + " of " +
      d.num_shards + " · updated " + new Date(d.time * 1000).toLocaleTimeString();
    previous = d;
  }

  function showLogin(message) {
    $("main").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    setStatus("token needed", true);
    $("token").focus();
  }

  async function poll() {
    timer = null;
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    try {
      const resp = await fetch("/v1/dashboard", { headers, cache: "no-store" });
      if (resp.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin(token ? "wrong token" : "");
        return;  // polling resumes after the form is sent
      }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const data = await resp.json();
      $("login").hidden = true;
      $("main").hidden = false;
      render(data);
      setStatus("live", false);
    } catch (err) {
      setStatus("cannot reach the server (" + err.message + "); retrying", true);
    }
    timer = setTimeout(poll, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();  // never a GET with the token in the URL
      const value = $("token").value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      $("token").value = "";
      $("login").hidden = true;
      setStatus("connecting…", false);
      if (timer === null) poll();
    });
    start();
  });

  async function start() {
    // ask first whether a token is needed, rather than provoking a 401
    try {
      const resp = await fetch("/v1/dashboard/auth", { cache: "no-store" });
      const auth = await resp.json();
      if (auth.token_required && !sessionStorage.getItem(TOKEN_KEY)) {
        showLogin("");
        return;
      }
    } catch (err) {
      setStatus("cannot reach the server (" + err.message + "); retrying", true);
      setTimeout(start, POLL_MS);
      return;
    }
    poll();
  }
})();
