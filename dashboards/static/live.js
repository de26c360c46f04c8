/* preemptscope live dashboard: fetches the JSON API with the bearer token and redraws in place.
 *
 * Token: ?token=... in the address (moved to sessionStorage and removed from the address bar) or
 * the sign-in form shown after a 401/403; sent as "Authorization: Bearer ...". Text from the
 * service is set with textContent; only card_html (escaped by the server) goes to innerHTML.
 */
(function () {
  "use strict";
  var KEY = "preemptscope-token";
  var root = document.body.getAttribute("data-root") || "";
  var content = document.getElementById("content");
  var statusEl = document.getElementById("status");
  var login = document.getElementById("login");
  var timer = null;
  var busy = false;
  var again = false; // a refresh was asked for while one was in flight
  window.__preemptscopeUpdates = 0;

  (function takeTokenFromAddress() {
    var url = new URL(window.location.href);
    var token = url.searchParams.get("token");
    if (token) {
      sessionStorage.setItem(KEY, token);
      url.searchParams.delete("token");
      history.replaceState(null, "", url.pathname + url.search + url.hash);
    }
  })();

  function setStatus(text, isError) {
    statusEl.textContent = text;
    statusEl.className = "meta status" + (isError ? " error" : "");
  }

  function api(path) {
    var headers = { Accept: "application/json" };
    var token = sessionStorage.getItem(KEY);
    if (token) headers.Authorization = "Bearer " + token;
    return fetch(root + path, { headers: headers, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) {
          var err = new Error(token ? "token rejected" : "sign-in required");
          err.auth = true;
          throw err;
        }
        if (!response.ok) {
          return response.text().then(function (text) {
            var detail = text;
            try {
              var body = JSON.parse(text);
              detail = body.detail || (body.error && (body.error.message || body.error)) || text;
            } catch (e) { /* not JSON: show the text */ }
            throw new Error(response.status + ": " + (typeof detail === "string" ? detail : JSON.stringify(detail)));
          });
        }
        return response.json();
      });
  }

  function needLogin(message) {
    login.hidden = false;
    content.hidden = true;
    setStatus(message, true);
    document.getElementById("token").focus();
  }

  document.getElementById("login-form").addEventListener("submit", function (event) {
    event.preventDefault();
    var value = document.getElementById("token").value.trim();
    if (!value) return;
    sessionStorage.setItem(KEY, value);
    document.getElementById("token").value = "";
    login.hidden = true;
    refresh();
  });

  function fail(err) {
    if (err.auth) { needLogin(err.message); return; }
    setStatus("update failed: " + err.message + " (retrying)", true);
  }

  // ---- deployment list -------------------------------------------------------------------
  function renderList(rows) {
    var list = document.getElementById("deployments");
    list.textContent = "";
    rows.forEach(function (row) {
      var li = document.createElement("li");
      var badge = document.createElement("span");
      badge.className = "badge state-" + String(row.state).replace(/[^a-z_]/g, "");
      badge.textContent = row.state_label;
      var link = document.createElement("a");
      link.href = root + "/deployments/" + encodeURIComponent(row.name);
      link.textContent = row.name;
      var info = document.createElement("span");
      info.className = "status";
      var parts = [];
      if (row.model) parts.push(row.model);
      parts.push(row.preemptions === null ? "no preemption count"
        : row.preemptions.toLocaleString() + " preemptions" + (row.preemptions_exact ? "" : " (lower bound)"));
      parts.push(row.episodes + " over-capacity episode" + (row.episodes === 1 ? "" : "s"));
      if (row.limit && row.limit !== "none" && row.limit !== "unknown") parts.push("limit: " + row.limit);
      if (row.kv_usage_max !== null) parts.push("KV " + (100 * row.kv_usage_max).toFixed(0) + "% (last complete window)");
      var filling = row.filling_window;
      if (filling && filling.kv_usage_max !== null) parts.push(
        "KV " + (100 * filling.kv_usage_max).toFixed(0) + "% so far in the window filling");
      info.textContent = parts.join(" · ");
      li.appendChild(badge); li.appendChild(link); li.appendChild(info);
      list.appendChild(li);
    });
    document.getElementById("empty").hidden = rows.length > 0;
  }

  // The last complete window beside the one filling: the gauges' numbers and what comes.
  function windowsNow(complete, filling) {
    var table = document.getElementById("windows-now");
    if (!table) return;
    var body = table.tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    var time = function (iso) { return new Date(iso).toLocaleTimeString(); };
    var fmt = function (value, scale) {
      return value === null || value === undefined ? "–" : (scale ? (100 * value).toFixed(0) + "%" : String(value));
    };
    [["last complete", complete, "complete"], ["filling", filling, "filling"]].forEach(function (item) {
      var w = item[1];
      var tr = document.createElement("tr");
      tr.setAttribute("data-window", item[2]);
      var cells = w ? [item[0], time(w.start) + "–" + time(w.end), fmt(w.preemptions),
        fmt(w.kv_usage_max, true), fmt(w.waiting_max), w.over_capacity ? "yes" : "no"]
        : [item[0], "no data", "–", "–", "–", "–"];
      cells.forEach(function (text) {
        var td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    table.hidden = !(complete || filling);
  }

  // The self-contained report, fetched with the token and saved through a blob: link.
  var download = document.getElementById("download");
  if (download) {
    download.addEventListener("click", function () {
      var note = document.getElementById("download-status");
      var headers = {};
      var token = sessionStorage.getItem(KEY);
      if (token) headers.Authorization = "Bearer " + token;
      note.textContent = "building…";
      fetch(root + "/api/dashboard/report.html", { headers: headers, cache: "no-store" })
        .then(function (response) {
          if (!response.ok) throw new Error(String(response.status));
          var name = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
          return response.blob().then(function (blob) {
            var link = document.createElement("a");
            link.href = URL.createObjectURL(blob);
            link.download = name ? name[1] : "preemptscope-report.html";
            document.body.appendChild(link);
            link.click();
            link.remove();
            setTimeout(function () { URL.revokeObjectURL(link.href); }, 10000);
            note.textContent = "saved " + link.download;
          });
        })
        .catch(function (err) { note.textContent = "download failed: " + err.message; });
    });
  }

  // ---- one deployment ------------------------------------------------------------------
  var name = content.getAttribute("data-deployment");
  var range = sessionStorage.getItem("preemptscope-range") || "1h";
  var config = { responsive: true, displaylogo: false };
  var FIGURES = { timeline: "fig-timeline", preemption_vs_tail: "fig-tail", capacity: "fig-capacity" };

  function pressButtons() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-range]"), function (b) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-range") === range));
    });
  }

  function renderDeployment(payload) {
    // Show the page before drawing: Plotly sizes a figure from its container, and a hidden
    // container has no width (the figures would stay at Plotly's 700-px default).
    login.hidden = true;
    content.hidden = false;
    document.getElementById("card").innerHTML = payload.card_html; // escaped server-side
    windowsNow(payload.complete_window, payload.filling_window);
    var drawn = Object.keys(FIGURES).map(function (key) {
      return window.preemptscopePlots.draw(FIGURES[key], payload.figures[key], config);
    });
    return Promise.all(drawn).then(function () {
      var when = new Date().toLocaleTimeString();
      var last = payload.last_window_end ? " · last window ends " + payload.last_window_end : "";
      document.getElementById("updated").textContent =
        payload.windows + " windows in range" + last + " · updated " + when;
      document.body.setAttribute("data-windows", String(payload.windows));
    });
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    again = false;
    var work = name === null
      ? api("/api/dashboard/deployments").then(renderList)
      : api("/api/deployments/" + encodeURIComponent(name) + "/figures?range=" + encodeURIComponent(range))
          .then(renderDeployment);
    work.then(function () {
      login.hidden = true;
      content.hidden = false;
      window.__preemptscopeUpdates += 1;
      setStatus("live · refreshed every " + (period() / 1000) + " s", false);
    }, fail).then(function () {
      busy = false;
      if (again) refresh(); else schedule();
    });
  }

  // Long ranges are heavier to build and change little between updates.
  function period() {
    return (range === "all" || range === "7d" || range === "24h") ? 30000 : 5000;
  }

  function schedule() {
    if (timer) clearTimeout(timer);
    if (!login.hidden) return; // wait for the token
    timer = setTimeout(refresh, period());
  }

  if (name !== null) {
    Array.prototype.forEach.call(document.querySelectorAll("[data-range]"), function (b) {
      b.addEventListener("click", function () {
        range = b.getAttribute("data-range");
        sessionStorage.setItem("preemptscope-range", range);
        pressButtons();
        // A new range is a new view: forget the zoom of the old one.
        Object.keys(FIGURES).forEach(function (k) {
          var gd = document.getElementById(FIGURES[k]);
          gd.__psZoom = null;
          if (gd.data) window.Plotly.purge(gd);
          gd.__psListening = false;
        });
        refresh();
      });
    });
    pressButtons();
  }
  refresh();
})();
