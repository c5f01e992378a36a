// Baton's dashboard: live pages over Server-Sent Events, and the job graph's pan and zoom.
// Pages are rendered on the server and work without this script; it only keeps them current.
"use strict";

(function () {
  // A live list page re-opens its own URL as an event stream: the server pushes the page's main
  // part each time it changes.
  function liveMain() {
    if (document.body.dataset.live !== "main") return;
    const main = document.querySelector("main");
    const es = new EventSource(location.href);
    es.addEventListener("main", (e) => { main.innerHTML = JSON.parse(e.data); });
  }

  // The job page follows the job's stream: tasks whose status changed are recoloured in the
  // graph and the table, the progress and the buttons follow the job.
  function liveJob() {
    const job = document.getElementById("job");
    if (!job) return;
    const setStatus = (el, prefix, status) => {
      el.classList.forEach((c) => { if (c.startsWith("st-")) el.classList.remove(c); });
      el.classList.add("st-" + status);
      if (prefix !== null) el.textContent = status;
    };
    const apply = (s) => {
      for (const [id, status] of Object.entries(s.tasks || {})) {
        const node = document.querySelector('#dag .node[data-id="' + CSS.escape(id) + '"]');
        if (node) {
          setStatus(node, null, status);
          const title = node.querySelector("title");
          if (title) title.textContent = title.textContent.replace(/: [a-z_]+$/, ": " + status);
        }
        const cell = document.querySelector('#tasks tr[data-id="' + CSS.escape(id) + '"] .badge');
        if (cell) setStatus(cell, "", status);
      }
      document.querySelectorAll("#task-counts .count").forEach((c) => {
        c.querySelector("b").textContent = (s.counts || {})[c.dataset.status] || 0;
      });
      setStatus(document.getElementById("job-status"), "", s.status);
      job.dataset.status = s.status;
      const progress = document.getElementById("job-progress");
      progress.max = s.total; progress.value = s.done;
      document.getElementById("job-done").textContent = s.done;
      document.getElementById("job-cancelling").hidden = !(s.cancelling && s.status === "processing");
      document.getElementById("cancel-form").hidden = s.status !== "processing" || s.cancelling;
      document.getElementById("resume-form").hidden = !s.canResume;
    };
    const es = new EventSource(job.dataset.liveUrl);
    es.addEventListener("state", (e) => apply(JSON.parse(e.data)));
    es.addEventListener("end", (e) => { apply(JSON.parse(e.data)); es.close(); });
  }

  // Pan (drag) and zoom (wheel, buttons) of the graph, by moving its viewBox.
  function graph() {
    const svg = document.getElementById("dag");
    if (!svg) return;
    const W = +svg.dataset.width, H = +svg.dataset.height;
    let vb = { x: 0, y: 0, w: W, h: H };
    const show = () => svg.setAttribute("viewBox", vb.x + " " + vb.y + " " + vb.w + " " + vb.h);
    const fit = () => {
      // Readable first: a large graph opens at a scale where its labels can be read, at its start.
      const r = svg.getBoundingClientRect();
      const scale = Math.min(1.25, Math.max(Math.min(r.width / W, r.height / H), Math.min(0.8, r.width / W * 8)));
      vb = { x: 0, y: 0, w: r.width / scale, h: r.height / scale };
      if (vb.w >= W && vb.h >= H) vb = { x: (W - vb.w) / 2, y: (H - vb.h) / 2, w: vb.w, h: vb.h };
      show();
    };
    const whole = () => {
      const r = svg.getBoundingClientRect();
      const scale = Math.min(r.width / W, r.height / H);
      vb = { w: r.width / scale, h: r.height / scale, x: 0, y: 0 };
      vb.x = (W - vb.w) / 2; vb.y = (H - vb.h) / 2;
      show();
    };
    const toGraph = (cx, cy) => {
      const r = svg.getBoundingClientRect();
      return { x: vb.x + (cx - r.left) / r.width * vb.w, y: vb.y + (cy - r.top) / r.height * vb.h };
    };
    const zoom = (f, cx, cy) => {
      const r = svg.getBoundingClientRect();
      const p = cx === undefined ? { x: vb.x + vb.w / 2, y: vb.y + vb.h / 2 } : toGraph(cx, cy);
      const w = Math.min(Math.max(vb.w * f, 40), Math.max(W, H) * 4);
      const h = w * r.height / r.width;
      vb = { x: p.x - (p.x - vb.x) * w / vb.w, y: p.y - (p.y - vb.y) * h / vb.h, w: w, h: h };
      show();
    };
    svg.addEventListener("wheel", (e) => { e.preventDefault(); zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, e.clientX, e.clientY); }, { passive: false });
    let drag = null, moved = false;
    svg.addEventListener("pointerdown", (e) => {
      drag = { x: e.clientX, y: e.clientY, vx: vb.x, vy: vb.y }; moved = false;
    });
    window.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const r = svg.getBoundingClientRect();
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!moved) { moved = true; svg.classList.add("dragging"); }
      vb.x = drag.vx - dx * vb.w / r.width; vb.y = drag.vy - dy * vb.h / r.height;
      show();
    });
    window.addEventListener("pointerup", () => { drag = null; svg.classList.remove("dragging"); });
    // A drag that moved is not a click on the task under it.
    svg.addEventListener("click", (e) => { if (moved) { e.preventDefault(); moved = false; } }, true);
    document.querySelectorAll("[data-zoom]").forEach((b) => b.addEventListener("click", () => {
      const z = b.dataset.zoom;
      if (z === "in") zoom(1 / 1.3); else if (z === "out") zoom(1.3); else whole();
    }));
    fit();
  }

  // Times: "12s ago" for a <time class="ago">, "12s" for a <time class="age">, kept current.
  function since(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (ms < 1000) return Math.max(0, Math.floor(ms)) + "ms";
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor(s % 86400 / 3600) + "h";
  }
  function times() {
    const now = Date.now();
    document.querySelectorAll("time.ago, time.age").forEach((t) => {
      const d = since(now - Date.parse(t.getAttribute("datetime")));
      const text = t.classList.contains("ago") ? d + " ago" : d;
      if (t.textContent !== text) t.textContent = text; // an unchanged text is no mutation: no loop

    });
  }
  new MutationObserver(times).observe(document.documentElement, { childList: true, subtree: true });
  setInterval(times, 1000);

  document.addEventListener("DOMContentLoaded", () => { times(); liveMain(); liveJob(); graph(); });
})();
