/* pyrometer's web report: draws the profile embedded in this page (element
 * #pyrometer-data, written by pyrometer/render/html.py) with plain DOM and SVG.
 * No library and no request: the page must work from file:// on a machine
 * without network, and stay small and fast for profiles of 200 files and 50k
 * lines.  Tables are built when their file is opened, as HTML strings (one
 * parse per chunk of rows is far cheaper than creating elements one by one),
 * and long files are filled in chunks between frames so the page never freezes.
 * Every number shown is one of the profile's own (docs/profile-schema.md).
 *
 * The profile may come from anywhere (pyrometer view of a file someone sent):
 * every value of it that goes into markup goes through esc(), or through a
 * formatter that can only give digits (fix, secs, pct, mb), never raw, even
 * where model.check has already made sure it is a number. */
(function () {
  "use strict";

  var t0 = performance.now();
  var D = JSON.parse(document.getElementById("pyrometer-data").textContent);
  var S = D.summary;
  var OPT = S.options || {};
  var COL = {};  // field name -> position in a data row (position 0 is the entry's index)
  D.fields.forEach(function (f, i) { COL[f] = i + 1; });
  var MEMORY = !!S.memory, GPU = !!S.gpu, KERNELS = GPU && S.gpu_kernel_tier === "on";
  // The lines' GPU columns: the model's rule (model.gpu_columns) ships their
  // fields only where the program used the GPU.
  var GPU_COLUMNS = COL.n_gpu_percent !== undefined, KERNEL_COLUMNS = COL.n_gpu_kernel_sec !== undefined;
  // Which columns are shown, and the cut-off below which a figure shown whole
  // is left blank: the model's rules (model/rules.py), in the page data.
  var COLUMNS = D.columns || {};
  var AWAITS = !!COLUMNS.awaits, CHURN = !!COLUMNS.churn, WAITS = !!COLUMNS.waits;
  var SHOWN = D.shown_from;
  // Shown in the header and used to pick the files opened at first (the
  // profile always holds them: the schema gives an older one the defaults).
  // Which lines reach the thresholds, how each is marked, each one's share of
  // the time and whether the samples were few, the model decided (the page
  // data's `significant`, `marks`, `shares`, `waits` and `sampling`: model.rules).
  var THRESHOLD = num(OPT.cpu_percent_threshold, 0);
  var MALLOC_THRESHOLD = MEMORY ? num(OPT.malloc_threshold, 0) : Infinity;
  var ELAPSED = num(S.elapsed_time_sec, 0);
  var FIRST_ROWS = 400, CHUNK_ROWS = 1000;  // rows built at once, then per task

  var reduced = !!OPT.reduced_profile;
  var tables = [];       // every table built so far

  function num(v, fallback) { return typeof v === "number" && isFinite(v) ? v : fallback; }
  var ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) { return ESCAPES[c]; });
  }
  function pct(v) { return v >= SHOWN ? Math.round(v) + "%" : ""; }
  // "±e" after a time share whose sampling error (a 95% interval, in points)
  // is a tenth of it or more and rounds to 1 or more (model/rules.py, shown_error).
  function errorOf(v, e) { return v >= SHOWN && e && e >= Math.max(0.1 * v, SHOWN) ? "±" + Math.round(e) : ""; }
  function timeField(name, label, width, narrow, short) {
    var f = field(name, label, pct, width, narrow, short);
    f.cell = function (E, k) {
      var v = E.get(k, name);
      return pct(v) + errorOf(v, E.get(k, name + "_error"));
    };
    return f;
  }
  function mb(v) { return v >= SHOWN ? (v < 10000 ? Math.round(v) + " MB" : Math.round(v / 1024) + " GB") : ""; }
  function fix(v, d) {
    var s = num(v, 0).toFixed(d);
    return /^-0(\.0*)?$/.test(s) ? s.slice(1) : s;  // no "-0.0" for a tiny negative
  }
  function secs(v) { v = num(v, 0); return v < 10 ? v.toFixed(3) + " s" : v.toFixed(1) + " s"; }
  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  /* ---- entries: the lines or functions of a file, as the page data has them ---- */

  function Entries(raw, fi) {
    this.text = raw.text;
    this.n = raw.text.length;
    this.lineno = raw.lineno || null;
    this.file = raw.file || null;        // per entry, for the all-files function view
    this.fi = fi;
    this.sparks = raw.sparks || {};
    this.marks = raw.marks || {};
    this.shares = raw.shares || {};
    this.waits = raw.waits || {};
    this.vals = new Array(this.n);
    for (var i = 0; i < raw.rows.length; i++) this.vals[raw.rows[i][0]] = raw.rows[i];
    this.kept = {};
    var kept = raw.significant || [];
    for (i = 0; i < kept.length; i++) this.kept[kept[i]] = true;
    this.nSignificant = kept.length;
  }
  Entries.prototype.get = function (k, field) {
    var r = this.vals[k];
    return r ? r[COL[field]] || 0 : 0;
  };
  Entries.prototype.ln = function (k) { return this.lineno ? this.lineno[k] : k + 1; };
  Entries.prototype.fileOf = function (k) { return this.file ? this.file[k] : this.fi; };
  Entries.prototype.share = function (k) { return this.shares[k] || 0; };
  Entries.prototype.wait = function (k) { return (this.waits[k] || [0, 0])[0]; };
  Entries.prototype.waitError = function (k) { return (this.waits[k] || [0, 0])[1]; };
  Entries.prototype.significant = function (k) { return !!this.kept[k]; };
  Entries.prototype.rowClass = function (k) { return this.marks[k] || ""; };

  var FILES = D.files.map(function (f, fi) {
    return { raw: f, fi: fi, lines: new Entries(f.lines, fi), functions: new Entries(f.functions, fi),
             section: null, body: null, built: false };
  });
  var MAXSHARE = 0;  // bars are drawn relative to the hottest line of the run
  FILES.forEach(function (F) {
    for (var k in F.lines.vals) MAXSHARE = Math.max(MAXSHARE, F.lines.share(+k));
  });
  MAXSHARE = MAXSHARE || 1;

  /* ---- columns ---- */

  function sparkSvg(E, k) {
    var s = E.sparks[k];
    if (!s || !allocated(E, k)) return "";
    var lo = 0, hi = 0, i, pts = [];
    for (i = 1; i < s.length; i += 2) { lo = Math.min(lo, s[i]); hi = Math.max(hi, s[i]); }
    // x: the line's own stretch of the run (the hover gives its times), so a
    // line that allocates for a moment still gets a readable curve.
    var span = hi - lo || 1, start = s[0], width = (s[s.length - 2] - start) || 1;
    for (i = 0; i < s.length; i += 2) {
      pts.push(((s[i] - start) / width * 64).toFixed(1) + "," + (15.5 - (s[i + 1] - lo) / span * 15).toFixed(1));
    }
    if (pts.length === 1) pts.push((+pts[0].split(",")[0] + 2).toFixed(1) + "," + pts[0].split(",")[1]);
    var zero = lo < 0 ? '<line x1="0" x2="64" y1="' + (15.5 + lo / span * 15).toFixed(1) + '" y2="' +
      (15.5 + lo / span * 15).toFixed(1) + '"/>' : "";
    return '<svg class="spark" viewBox="0 0 64 16" preserveAspectRatio="none" data-t="spark">' + zero +
      '<polyline points="' + pts.join(" ") + '"/></svg>';
  }
  function barHtml(E, k) {
    var py = E.get(k, "n_cpu_percent_python"), na = E.get(k, "n_cpu_percent_c"), sy = E.get(k, "n_sys_percent");
    var wt = E.wait(k);
    if (E.share(k) <= 0) return "";
    var f = 100 / MAXSHARE;
    return '<div class="bar" data-t="bar"><i class="py" style="width:' + (py * f).toFixed(2) + '%"></i><i class="na" style="width:' +
      (na * f).toFixed(2) + '%"></i><i class="sy" style="width:' + (sy * f).toFixed(2) + '%"></i><i class="wt" style="width:' +
      (wt * f).toFixed(2) + '%"></i></div>';
  }
  // width: a column's width; narrow and short: its width and its name in a
  // window too narrow for the wide columns to leave the source in view (the
  // media query in report.css picks them; the full name stays in the tooltip).
  function field(name, label, format, width, narrow, short) {
    return { id: name, label: label, width: width, narrow: narrow, short: short,
             key: function (E, k) { return E.get(k, name); },
             cell: function (E, k) { return format(E.get(k, name)); } };
  }
  function allocated(E, k) { return E.get(k, "n_malloc_mb") >= SHOWN; }
  // " ± e" after a memory figure whose sampling error (a 95% interval) is a
  // tenth of it or more; nothing otherwise (model._Memory.errors).
  function within(value, error) {
    return error && error >= Math.max(0.1 * value, 1) ? " ± " + fix(error, 0) : "";
  }

  var TIME_COLS = [
    timeField("n_cpu_percent_python", "Time Python", "100px", "50px", "Py"),
    timeField("n_cpu_percent_c", "native", "64px", "46px", "nat"),
    timeField("n_sys_percent", "system", "68px", "46px", "sys"),
  ].concat(WAITS ? [
    { id: "wait", label: "wait", title: "waiting for the GIL or for a CPU", width: "56px", narrow: "46px",
      key: function (E, k) { return E.wait(k); },
      cell: function (E, k) { return pct(E.wait(k)) + errorOf(E.wait(k), E.waitError(k)); } },
  ] : [], [
    { id: "time", label: "time", title: "total time (the bar: Python, native, system, wait)", width: "96px",
      narrow: "54px",
      key: function (E, k) { return E.share(k); }, cell: barHtml },
  ]);
  var AWAIT_COLS = AWAITS ? [
    { id: "n_await_percent", label: "await", width: "60px", narrow: "50px", short: "awt",
      title: "share of all the time coroutines spent suspended at an await (not of the run time)",
      key: function (E, k) { return E.get(k, "n_await_percent"); },
      cell: function (E, k) { return pct(E.get(k, "n_await_percent")); } },
  ] : [];
  var GPU_COLS = GPU_COLUMNS ? [field("n_gpu_percent", "GPU", pct, "52px", "46px"),
                                field("n_gpu_peak_memory_mb", "GPU memory", mb, "90px", "52px", "GPU MB")] : [];
  function seconds(v) { return v >= 0.0005 ? (v < 1 ? Math.round(v * 1000) + "ms" : v.toFixed(2) + "s") : ""; }
  // The kernel tier's: device time of the kernels a line launched, the bytes it
  // copied (the tooltip: by direction), the device memory it allocated.
  var KERNEL_COLS = KERNEL_COLUMNS ? [
    field("n_gpu_kernel_sec", "GPU kernel", seconds, "90px", "52px", "kern"),
    { id: "n_gpu_copy_mb", label: "GPU copy", width: "80px", narrow: "52px", short: "GPU cp",
      title: "MB copied to, from and on the GPU by the work the line launched",
      key: function (E, k) { return E.get(k, "n_gpu_copy_mb"); },
      cell: function (E, k) {
        var v = E.get(k, "n_gpu_copy_mb");
        if (v < SHOWN) return "";
        return '<span title="HtoD ' + E.get(k, "n_gpu_copy_htod_mb").toFixed(1) + " MB, DtoH " +
          E.get(k, "n_gpu_copy_dtoh_mb").toFixed(1) + " MB, DtoD " + E.get(k, "n_gpu_copy_dtod_mb").toFixed(1) +
          ' MB">' + mb(v) + "</span>";
      } },
    field("n_gpu_alloc_mb", "GPU alloc", mb, "80px", "52px", "GPU al"),
  ] : [];
  var MEMORY_COLS = MEMORY ? [
    { id: "n_python_fraction", label: "Memory Python", width: "126px", narrow: "52px", short: "mem Py",
      key: function (E, k) { return allocated(E, k) ? E.get(k, "n_python_fraction") : -1; },
      cell: function (E, k) { return allocated(E, k) ? pct(E.get(k, "n_python_fraction") * 100) : ""; } },
    field("n_peak_mb", "peak", mb, "70px", "56px"),
    { id: "timeline", label: "timeline", title: "MB allocated (the sparkline: net memory over time)", width: "80px",
      narrow: "46px", short: "tl", key: function (E, k) { return E.get(k, "n_malloc_mb"); }, cell: sparkSvg },
    { id: "n_usage_fraction", label: "%", title: "share of all allocation activity", width: "44px", narrow: "44px", key: function (E, k) { return E.get(k, "n_usage_fraction"); },
      cell: function (E, k) { return allocated(E, k) ? pct(E.get(k, "n_usage_fraction") * 100) : ""; } },
    field("n_copy_mb_s", "Copy MB/s", function (v) { return v >= SHOWN ? String(Math.round(v)) : ""; }, "92px",
          "50px", "copy"),
  ].concat(CHURN ? [
    { id: "n_churn_mb", label: "churn", width: "64px", narrow: "40px", short: "chn",
      title: "MB of tiny temporaries made and freed at once (allocator traffic, not held; not in allocated)",
      key: function (E, k) { return E.get(k, "n_churn_mb"); },
      cell: function (E, k) { return mb(E.get(k, "n_churn_mb")); } },
  ] : []) : [];
  var LINE_COL = { id: "lineno", label: "Line", cls: "n", asc: true,
                   key: function (E, k) { return E.ln(k); }, cell: function (E, k) { return esc(E.ln(k)); } };
  var SOURCE_COL = { id: "source", label: "source", cls: "src", asc: true, width: "minmax(40ch, max-content)",
                     narrow: "minmax(24ch, max-content)",
                     key: function (E, k) { return E.text[k]; }, cell: function (E, k) { return esc(E.text[k]); } };
  var FUNCTION_COL = { id: "function", label: "function", cls: "fn", asc: true, width: "minmax(16ch, 40ch)",
                       key: function (E, k) { return E.text[k]; },
                       cell: function (E, k) {
                         return '<a title="' + esc(E.text[k]) + '" href="#L' + E.fileOf(k) + "-" + esc(E.ln(k)) + '" data-goto="' +
                           E.fileOf(k) + ":" + esc(E.ln(k)) + '">' + esc(E.text[k]) + "</a>";
                       } };
  var FILE_COL = { id: "file", label: "file", cls: "fn", asc: true, width: "minmax(12ch, 36ch)",
                   key: function (E, k) { return FILES[E.fileOf(k)].raw.display; },
                   cell: function (E, k) {
                     var d = esc(FILES[E.fileOf(k)].raw.display);
                     return '<span title="' + d + '">' + d + "</span>";
                   } };
  var NUMBERS = TIME_COLS.concat(AWAIT_COLS, GPU_COLS, KERNEL_COLS, MEMORY_COLS);

  /* ---- sortable tables, filled in chunks ----
   * Not <table>: a table's layout measures every cell of every row, which costs
   * seconds for tens of thousands of lines.  Rows are grids with fixed column
   * widths, in blocks of BLOCK_ROWS that the browser skips laying out and
   * painting while they are off screen (content-visibility: auto), so the cost
   * of a file stays that of the rows in view. */

  var BLOCK_ROWS = 200, ROW_PX = 18;

  function Table(E, cols, kind, now) {
    this.E = E;
    this.cols = cols;
    this.kind = kind;              // "lines" or "functions"
    // Functions: by total time (the "time" column, found by its id: the wait
    // column came before it and took its index).
    this.sortCol = kind === "lines" ? 0 : cols.findIndex(function (c) { return c.id === "time"; });
    this.desc = kind !== "lines";
    this.job = null;
    this.el = document.createElement("div");
    this.el.className = "prof " + kind;
    this.el.setAttribute("role", "table");
    this.el._table = this;
    var digits = 1;
    for (var k = 0; k < E.n; k++) digits = Math.max(digits, String(E.ln(k)).length);
    this.el.style.setProperty("--cols", cols.map(function (c) {
      return c.id === "lineno" ? "max(60px, calc(" + digits + "ch + 14px))" : c.width;
    }).join(" "));
    this.el.style.setProperty("--cols-narrow", cols.map(function (c) {
      return c.id === "lineno" ? "max(40px, calc(" + digits + "ch + 14px))" : c.narrow || c.width;
    }).join(" "));
    var head = '<div class="h" role="row">';
    for (var i = 0; i < cols.length; i++) {
      head += '<span role="columnheader" data-c="' + i + '" class="' + (cols[i].cls || "") + '" title="sort by ' +
        esc(cols[i].title || cols[i].label) + '"' + (cols[i].short ? ' data-short="' + esc(cols[i].short) + '"' : "") +
        ">" + esc(cols[i].label) + "</span>";
    }
    this.el.innerHTML = head + '</div><div class="rows"></div>';
    this.rows = this.el.lastChild;
    tables.push(this);
    this.fill(now);
  }
  Table.prototype.order = function () {
    var E = this.E, out = [], k;
    for (k = 0; k < E.n; k++) if (!reduced || E.significant(k)) out.push(k);
    var col = this.cols[this.sortCol], sign = this.desc ? -1 : 1, keys = new Array(E.n);
    for (var i = 0; i < out.length; i++) keys[out[i]] = col.key(E, out[i]);
    out.sort(function (a, b) {
      var x = keys[a], y = keys[b];
      return x < y ? -sign : x > y ? sign : a - b;
    });
    return out;
  };
  Table.prototype.rowHtml = function (k) {
    var E = this.E, cls = E.rowClass(k), h = '<div class="r' + (cls ? " " + cls : "") + '" role="row"', cols = this.cols;
    h += ' data-k="' + k + '"';
    if (this.kind === "lines") h += ' id="L' + E.fi + "-" + esc(E.ln(k)) + '"';
    h += ">";
    for (var i = 0; i < cols.length; i++) {
      h += cols[i].cls ? '<span class="' + cols[i].cls + '">' : "<span>";
      h += cols[i].cell(E, k) + "</span>";
    }
    return h + "</div>";
  };
  /* Rows not drawn at once wait in one queue, worked off a budget of rows per
   * task, so that opening every file or switching the reduced view never holds
   * the page for more than a moment. */
  var queue = [], queued = false;
  function runQueue() {
    var budget = CHUNK_ROWS;
    while (queue.length && budget > 0) budget -= queue[0](budget);
    queued = queue.length > 0;
    if (queued) setTimeout(runQueue, 0);
  }
  function enqueue(job) {
    queue.push(job);
    if (!queued) { queued = true; setTimeout(runQueue, 0); }
  }
  function dequeue(job) {
    var at = queue.indexOf(job);
    if (at >= 0) queue.splice(at, 1);
  }

  // Draw the rows in their current order: the first FIRST_ROWS now when asked
  // to (the user opened or sorted this table), the rest through the queue.
  Table.prototype.fill = function (now) {
    var self = this, order = this.order(), i = 0;
    var heads = this.el.firstChild.childNodes;
    for (var c = 0; c < heads.length; c++) {
      if (c === this.sortCol) heads[c].setAttribute("aria-sort", this.desc ? "descending" : "ascending");
      else heads[c].removeAttribute("aria-sort");
    }
    if (this.job) { dequeue(this.job); this.job = null; }
    this.rows.textContent = "";
    this.shown = order.length;
    if (!order.length) {
      this.rows.innerHTML = '<div class="empty muted">' +
        (reduced ? "No " + (this.kind === "lines" ? "line" : "function") + " reaches the thresholds." :
                   "Nothing recorded.") + "</div>";
      return;
    }
    function blocks(n) {  // the next n rows, in blocks of at most BLOCK_ROWS
      var parts = [], end = Math.min(order.length, i + n), start = i;
      while (i < end) {
        var stop = Math.min(end, i + BLOCK_ROWS);
        parts.push('<div class="blk" style="contain-intrinsic-size:auto ' + (stop - i) * ROW_PX + 'px">');
        for (; i < stop; i++) parts.push(self.rowHtml(order[i]));
        parts.push("</div>");
      }
      self.rows.insertAdjacentHTML("beforeend", parts.join(""));
      return i - start;
    }
    if (now) blocks(FIRST_ROWS);
    if (i >= order.length) return;
    var job = this.job = function (budget) {
      var done = blocks(budget);
      if (i >= order.length) { dequeue(job); self.job = null; }
      return done;
    };
    enqueue(job);
  };
  Table.prototype.finish = function () { if (this.job) this.job(Infinity); };
  Table.prototype.sortBy = function (c) {
    if (c === this.sortCol) this.desc = !this.desc;
    else { this.sortCol = c; this.desc = !this.cols[c].asc; }
    this.fill(true);
  };

  /* ---- the page ---- */

  var app = document.getElementById("app");
  var tip = document.createElement("div");
  tip.id = "tip";
  tip.hidden = true;
  document.body.appendChild(tip);

  function optionsText() {
    var parts = [];
    parts.push(MEMORY ? "CPU + memory (sampling window " +
      Math.round(num(S.allocation_sampling_window_bytes, OPT.allocation_sampling_window) / 1024) + " KiB)" :
      "CPU only");
    if (GPU) parts.push("GPU: " + String(S.gpu_device || "?") + (S.gpu_utilization_source === "process" ?
      " (this process's share)" : "") + ", busy " + num(S.gpu_time_sec, 0).toFixed(2) + " s" +
      (KERNELS ? ", " + num(S.gpu_kernels, 0) + " kernels (" + num(S.gpu_kernel_time_sec, 0).toFixed(3) +
       " s on the device), " + num(S.gpu_copies, 0) + " copies" : ""));
    parts.push("sampling every " + (num(OPT.cpu_sampling_rate, 0.01) * 1000).toFixed(1) + " ms");
    parts.push("threshold " + THRESHOLD + "%");
    if (MEMORY) parts.push("malloc threshold " + MALLOC_THRESHOLD + " MB");
    if (OPT.use_virtual_time) parts.push("virtual time");
    if (OPT.profile_all) parts.push("all files");
    if (OPT.profile_only && OPT.profile_only.length) parts.push("only " + OPT.profile_only.join(", "));
    if (OPT.profile_exclude && OPT.profile_exclude.length) parts.push("excluding " + OPT.profile_exclude.join(", "));
    if (OPT.reduced_profile) parts.push("reduced profile");
    if (OPT.off) parts.push("started paused (--off)");
    return parts.join(" · ");
  }

  function where(fi, lineno) {
    var F = FILES[fi];
    var short = F.raw.display.split("/").pop(), n = esc(lineno);
    return '<a href="#L' + fi + "-" + n + '" data-goto="' + fi + ":" + n + '" title="' +
      esc(F.raw.display) + ":" + n + '">' + esc(short) + ":" + n + "</a>";
  }
  function fileIndex(name) {
    for (var i = 0; i < FILES.length; i++) if (FILES[i].raw.name === name) return i;
    return -1;
  }
  function whereName(name, lineno) {
    var fi = fileIndex(name);
    return fi >= 0 ? where(fi, lineno) : esc(name) + ":" + esc(lineno);
  }

  // The verdict (the model's verdict field): its sentence as text, and the
  // lines it names as links into the tables.
  function verdictHtml() {
    var V = S.verdict;
    if (!V || typeof V.summary !== "string") return "";
    var lines = Array.isArray(V.lines) ? V.lines : [];
    return '<div class="verdict" id="verdict" data-bound="' + esc(V.bound) + '"><strong>Verdict</strong> ' +
      esc(V.summary) + (lines.length ? '<div class="verdict-lines">' + lines.map(function (l) {
        var figure = l.unit === "MB" ? fix(l.value, 0) + " MB" : secs(l.value);
        // A line outside the @profile functions has no row to link to.
        var at = l.shown === false ? esc(String(l.filename).split("/").pop()) + ":" + esc(l.lineno)
          : whereName(l.filename, l.lineno);
        return "<span>" + at + " " + esc(figure) + " (" + fix(l.percent, 0) + "%)" +
          (l.shown === false ? ' <span class="muted">not shown (outside the @profile functions)</span>' : "") +
          "</span>";
      }).join("") + "</div>" : "") + "</div>";
  }

  function summaryHtml() {
    var cpu = S.cpu_time_sec || {}, h = "";
    var samples = num(S.cpu_samples, 0), threads = num(S.threads, 0);
    h += '<h1>pyrometer: <span class="prog">' + esc(S.program || "?") + '</span> <span class="args">' +
      esc((S.args || []).join(" ")) + "</span></h1>";
    h += verdictHtml();
    var paused = num(S.paused_sec, 0);
    h += '<div class="meta" id="run-meta">elapsed ' + secs(ELAPSED) +
      (paused >= 0.0005 ? " (paused " + secs(paused) + ", not charged)" : "") + " · " + plural(samples, "sample") +
      (samples ? " (every " + (num(S.sampling_interval_sec, 0) * 1000).toFixed(1) + " ms on average)" : "") +
      (num(S.cpu_peeks, 0) ? ", " + plural(num(S.cpu_peeks, 0), "peek") : "") +
      " · " + plural(threads, "thread") + (num(S.process_count, 1) > 1 ? " · " +
      num(S.process_count, 1) + " processes" : "") +
      " · " + plural(num(S.n_cpus, 0), "CPU") +
      (S.exit_status === null || S.exit_status === undefined ? "" : " · exit status " + esc(S.exit_status)) + "</div>";
    h += '<div class="meta">Python ' + esc(S.python_version || "?") + " on " + esc(S.platform || "?") +
      (S.start_time_absolute ? " · started " + esc(new Date(S.start_time_absolute * 1000).toLocaleString()) : "") +
      "</div>";
    h += '<div class="meta" id="run-options">options: ' + esc(optionsText()) + "</div>";
    (Array.isArray(S.notices) ? S.notices : []).forEach(function (n) {
      h += '<div class="note notice">' + esc(String(n)) + "</div>";
    });
    if (S.exit_status === null && (S.ended_by === null || S.ended_by === undefined)) {
      h += '<div class="note" id="note-partial">A snapshot taken while the program was still running ' +
        "(--profile-interval): the final profile is written when it ends.</div>";
    }
    if (D.sampling === "none") {
      h += '<div class="note" id="note-brief">The program ran too briefly to be sampled (' + secs(ELAPSED) +
        ", one sample every " + (num(OPT.cpu_sampling_rate, 0) * 1000).toFixed(1) +
        " ms on average): no time could be attributed to its lines." +
        (MEMORY ? " What memory sampling saw is shown." : "") +
        " A lower --cpu-sampling-rate or a longer run gives a profile.</div>";
    } else if (D.sampling === "few") {
      h += '<div class="note" id="note-few">Only ' + plural(samples, "sample") +
        " were taken: the percentages below are rough.</div>";
    }
    h += '<div class="cards">';
    var py = num(cpu.python, 0), na = num(cpu.native, 0), sy = num(cpu.system, 0);
    var gw = num(cpu.gil_wait, 0), cw = num(cpu.cpu_wait, 0), all = num(S.total_time_sec, 0);
    function seg(cls, label, v) {
      var share = all > 0 ? v / all * 100 : 0;
      return { bar: '<i class="' + cls + '" style="width:' + share.toFixed(2) + '%" data-tip="' + label + " " +
                    fix(v, 3) + " s (" + share.toFixed(1) + '%)"></i>',
               legend: '<span style="--c:var(--' + cls + ')">' + label + " " +
                    secs(v) + " (" + share.toFixed(0) + "%)</span>" };
    }
    var segs = [seg("py", "Python", py), seg("na", "native", na), seg("sy", "system", sy)];
    if (gw + cw > 0) segs.push(seg("wt", "wait (GIL " + fix(gw, 3) + " s, CPU " + fix(cw, 3) + " s)", gw + cw));
    h += '<div class="card" id="card-time"><h3>Time</h3><div class="big">' + secs(all) +
      ' <span class="muted" style="font-size:13px;font-weight:400">charged to the program, over ' +
      plural(threads, "thread") + "</span></div>" +
      '<div class="split" id="time-split">' + segs.map(function (s) { return s.bar; }).join("") + "</div>" +
      '<div class="legend">' + segs.map(function (s) { return s.legend; }).join("") + "</div>" +
      (AWAITS ? '<div class="muted" id="time-await">coroutines suspended at awaits ' + secs(S.await_time_sec) +
        " (task time, the await column's total) · event loop idle " + secs(S.event_loop_idle_sec) +
        " (in no percentage)</div>" : "") + "</div>";
    if (MEMORY) {
      var w = S.max_footprint_where;
      h += '<div class="card" id="card-memory"><h3>Memory</h3><div class="big">peak ' +
        fix(S.max_footprint_mb, 1) + ' MB</div><div class="muted">' +
        (w ? "at " + whereName(w.filename, w.lineno) : "") +
        (S.max_footprint_time_sec ? ", " + fix(S.max_footprint_time_sec, 2) + " s into the run" : "") +
        " · at the end " + fix(S.footprint_mb, 1) + " MB · growth " + fix(S.growth_rate_mb_s, 2) + " MB/s</div>" +
        footprintSvg() + '<div class="axis"><span>0 s</span><span>footprint over time</span><span>' +
        secs(ELAPSED) + "</span></div></div>";
      var leaks = [];
      FILES.forEach(function (F, fi) {
        var L = F.raw.leaks || {};
        Object.keys(L).forEach(function (n) { leaks.push([fi, +n, L[n]]); });
      });
      leaks.sort(function (a, b) { return b[2].velocity_mb_s - a[2].velocity_mb_s; });
      h += '<div class="card" id="card-leaks"><h3>Possible leaks</h3><ul class="plain">' +
        (leaks.length ? leaks.slice(0, 10).map(function (l) {
          return '<li class="leak">' + where(l[0], l[1]) + ": " + fix(l[2].growth_mb, 1) + " MB not freed, " +
            fix(l[2].velocity_mb_s, 2) + " MB/s (likelihood " + fix(l[2].likelihood * 100, 1) + "%)</li>";
        }).join("") : '<li class="muted">none detected</li>') + "</ul></div>";
      var top = S.top_allocations || [];
      h += '<div class="card" id="card-top"><h3>Top allocating lines</h3><ul class="plain">' +
        (top.length ? top.map(function (t) {
          return "<li>" + whereName(t.filename, t.lineno) + ": " + fix(t.n_malloc_mb, 1) +
            within(t.n_malloc_mb, t.n_malloc_mb_error) + " MB (" + fix(t.n_python_fraction * 100, 0) + "% Python)</li>";
        }).join("") : '<li class="muted">no allocation was sampled</li>') + "</ul></div>";
      if ((S.churn_mb || 0) >= 1) {
        h += '<div class="card" id="card-churn"><h3>Churn of tiny temporaries</h3><div class="muted">' +
          fix(S.churn_mb, 0) + " MB of small Python objects made and freed at once: allocator traffic, " +
          "not memory held (each line's in its memory tooltip)</div></div>";
      }
    } else {
      h += '<div class="card" id="card-memory"><h3>Memory</h3><div class="muted">not profiled ' +
        "(--cpu-only or --no-memory)</div></div>";
    }
    return h + "</div>" + processesHtml();
  }

  // The per-process table (the first process and its children); every string
  // in it comes from the profile, so all of it goes through esc().
  function processesHtml() {
    var rows = Array.isArray(S.processes) ? S.processes : [], count = num(S.process_count, rows.length);
    if (count <= 1) return "";
    function cell(v, d) { return typeof v === "number" && isFinite(v) ? fix(v, d) : ""; }
    var h = '<details class="processes" id="processes"' + (count <= 20 ? " open" : "") + "><summary>" +
      esc(count) + " processes" + (count > rows.length ? " (the first " + esc(rows.length) + " listed)" : "") +
      "</summary><table class=\"proc\"><thead><tr><th>pid</th><th>parent</th><th>wall s</th><th>CPU s</th>" +
      "<th>peak MB</th><th>exit</th><th>how</th><th>command</th></tr></thead><tbody>";
    rows.forEach(function (r) {
      if (!r || typeof r !== "object") return;
      var exit = r.exit_status === null || r.exit_status === undefined ? "" : String(r.exit_status);
      if (r.ended_by && r.ended_by !== "exit") exit += exit ? " (" + r.ended_by + ")" : String(r.ended_by);
      var command = (Array.isArray(r.command) ? r.command : []).map(String).join(" ");
      h += "<tr" + (r.profiled === false ? ' class="muted"' : "") + "><td>" + esc(r.pid) + "</td><td>" +
        esc(r.ppid === null || r.ppid === undefined ? "" : r.ppid) + "</td><td>" + cell(r.wall_sec, 3) +
        "</td><td>" + cell(r.cpu_sec, 3) + "</td><td>" + cell(r.peak_mb, 1) + "</td><td>" + esc(exit) +
        "</td><td>" + esc(String(r.started_by || "") + (r.profiled === false ? ", not profiled" : "")) +
        '</td><td class="cmd">' + esc(command) + (r.note ? ' <span class="muted">[' + esc(String(r.note)) +
        "]</span>" : "") + "</td></tr>";
    });
    return h + "</tbody></table></details>";
  }

  function footprintSvg() {
    var s = S.samples || [];
    if (!s.length) return '<div class="muted" id="footprint">no footprint samples</div>';
    var end = ELAPSED || s[s.length - 1][0] || 1, lo = 0, hi = 0, i;
    for (i = 0; i < s.length; i++) { lo = Math.min(lo, s[i][1]); hi = Math.max(hi, s[i][1]); }
    var span = hi - lo || 1, W = 600, H = 120;
    function x(t) { return (Math.min(t / end, 1) * W).toFixed(1); }
    function y(v) { return (H - 2 - (v - lo) / span * (H - 6)).toFixed(1); }
    var d = "M" + x(s[0][0]) + "," + y(lo);
    for (i = 0; i < s.length; i++) d += "L" + x(s[i][0]) + "," + y(s[i][1]);
    d += "L" + x(s[s.length - 1][0]) + "," + y(lo) + "Z";
    return '<svg class="chart" id="footprint" viewBox="0 0 ' + W + " " + H + '" preserveAspectRatio="none">' +
      '<path class="area" d="' + d + '"/><line class="cursor" x1="-10" x2="-10" y1="0" y2="' + H + '"/></svg>';
  }

  function toolbarHtml() {
    return '<div class="toolbar"><div class="tabs" role="tablist">' +
      '<button role="tab" id="tab-lines" aria-selected="true">Lines</button> ' +
      '<button role="tab" id="tab-functions" aria-selected="false">Functions</button></div>' +
      '<label><input type="checkbox" id="reduced"' + (reduced ? " checked" : "") +
      "> reduced view (lines over the thresholds only)</label>" +
      '<button id="expand-all">expand all</button><button id="collapse-all">collapse all</button>' +
      '<input type="search" id="file-filter" placeholder="filter files"> ' +
      '<span class="muted">' + plural(FILES.length, "file") + "</span></div>";
  }

  function filesHtml() {
    var h = ['<div id="view-lines">'];
    FILES.forEach(function (F, fi) {
      var f = F.raw;
      h.push('<section class="file" id="F' + fi + '" data-fi="' + fi + '"><div class="file-head" role="button" ' +
        'tabindex="0" aria-expanded="false"><span class="tri">&#9654;</span><span class="name" title="' +
        esc(f.name) + '">' + esc(f.display) + '</span><span class="share">' + fix(f.percent_cpu_time, 1) +
        "% · " + secs(f.cpu_time_sec) + " · " + plural(F.lines.n, "line") + "</span></div>" +
        '<div class="file-body"></div></section>');
    });
    if (!FILES.length) h.push('<p class="muted">No file of the program was recorded.</p>');
    h.push('</div><div id="view-functions" hidden></div>');
    return h.join("");
  }

  function build(F, now) {
    if (F.built) return;
    F.built = true;
    F.linesTable = new Table(F.lines, [LINE_COL].concat(NUMBERS, [SOURCE_COL]), "lines", now);
    F.body.appendChild(F.linesTable.el);
    if (F.functions.n) {
      var cap = document.createElement("div");
      cap.className = "more";
      cap.textContent = "Functions of " + F.raw.display;
      F.body.appendChild(cap);
      F.functionsTable = new Table(F.functions, [FUNCTION_COL, LINE_COL].concat(NUMBERS), "functions", now);
      F.body.appendChild(F.functionsTable.el);
    }
    var L = F.raw.leaks || {}, keys = Object.keys(L);
    if (keys.length) {
      var ul = document.createElement("ul");
      ul.className = "plain more";
      ul.innerHTML = keys.map(function (n) {
        return '<li class="leak">possible leak at line ' + esc(n) + ": " + fix(L[n].growth_mb, 1) + " MB not freed, " +
          fix(L[n].velocity_mb_s, 2) + " MB/s (likelihood " + fix(L[n].likelihood * 100, 1) + "%)</li>";
      }).join("");
      F.body.appendChild(ul);
    }
  }
  function setOpen(F, open, now) {
    if (open) build(F, now);
    F.section.classList.toggle("open", open);
    F.head.setAttribute("aria-expanded", open ? "true" : "false");
  }

  var functionsTable = null;
  function allFunctions() {
    var raw = { text: [], rows: [], sparks: {}, lineno: [], file: [], significant: [], marks: {}, shares: {}, waits: {} };
    FILES.forEach(function (F, fi) {
      var E = F.functions;
      for (var k = 0; k < E.n; k++) {
        var at = raw.text.length;
        raw.text.push(E.text[k]);
        raw.lineno.push(E.ln(k));
        raw.file.push(fi);
        if (E.vals[k]) raw.rows.push([at].concat(E.vals[k].slice(1)));
        if (E.sparks[k]) raw.sparks[at] = E.sparks[k];
        if (E.kept[k]) raw.significant.push(at);
        if (E.marks[k]) raw.marks[at] = E.marks[k];
        if (E.shares[k]) raw.shares[at] = E.shares[k];
        if (E.waits[k]) raw.waits[at] = E.waits[k];
      }
    });
    return new Entries(raw, -1);
  }
  function showView(name) {
    document.getElementById("view-lines").hidden = name !== "lines";
    document.getElementById("view-functions").hidden = name !== "functions";
    document.getElementById("tab-lines").setAttribute("aria-selected", String(name === "lines"));
    document.getElementById("tab-functions").setAttribute("aria-selected", String(name === "functions"));
    if (name === "functions" && !functionsTable) {
      functionsTable = new Table(allFunctions(), [FUNCTION_COL, FILE_COL, LINE_COL].concat(NUMBERS), "functions", true);
      functionsTable.el.id = "all-functions";
      document.getElementById("view-functions").appendChild(functionsTable.el);
    }
  }

  function applyFilters() {
    var text = document.getElementById("file-filter").value.toLowerCase();
    FILES.forEach(function (F) {
      var hideReduced = reduced && !F.lines.nSignificant;
      var hideText = text && F.raw.name.toLowerCase().indexOf(text) < 0;
      F.section.hidden = !!(hideReduced || hideText);
    });
  }
  function setReduced(on) {
    reduced = on;
    tables.forEach(function (t) { t.fill(false); });
    applyFilters();
  }

  function goto(fi, lineno) {
    var F = FILES[fi];
    if (!F) return;
    showView("lines");
    F.section.hidden = false;
    setOpen(F, true, true);
    var row = document.getElementById("L" + fi + "-" + lineno);
    if (!row && reduced) { document.getElementById("reduced").checked = false; setReduced(false); }
    F.linesTable.finish();
    row = document.getElementById("L" + fi + "-" + lineno);
    if (!row) return;
    row.scrollIntoView({ block: "center" });
    row.classList.add("flash");
    setTimeout(function () { row.classList.remove("flash"); }, 1500);
  }

  /* ---- hover figures ---- */

  function tipText(el) {
    if (el.dataset.tip) return el.dataset.tip;
    var tr = el.closest(".r"), table = el.closest(".prof");
    if (!tr || !table || !table._table) return "";
    var E = table._table.E, k = +tr.dataset.k, g = function (f) { return E.get(k, f); };
    var name = table._table.kind === "lines" ? FILES[E.fi].raw.display + ":" + E.ln(k) : E.text[k];
    if (el.dataset.t === "bar") {
      return name + "\nPython  " + fix(g("n_cpu_percent_python"), 1) + "%  (" + fix(g("n_cpu_python_sec"), 3) + " s)" +
        "\nnative  " + fix(g("n_cpu_percent_c"), 1) + "%  (" + fix(g("n_cpu_native_sec"), 3) + " s)" +
        "\nsystem  " + fix(g("n_sys_percent"), 1) + "%  (" + fix(g("n_sys_sec"), 3) + " s)" +
        "\nall time " + fix(E.share(k), 1) + "% ± " + fix(g("n_time_percent_error"), 1) + " (95% interval)" +
        "\ncore utilisation " + fix(g("n_core_utilization") * 100, 0) + "% · " + plural(g("n_samples"), "sample");
    }
    if (el.dataset.t === "spark") {
      var s = E.sparks[k] || [], t = "";
      if (s.length) t = "\ntimeline " + fix(s[0], 2) + " s to " + fix(s[s.length - 2], 2) + " s, net " +
        fix(s[1], 1) + " MB to " + fix(s[s.length - 1], 1) + " MB";
      return name + "\nallocated " + fix(g("n_malloc_mb"), 1) + within(g("n_malloc_mb"), g("n_malloc_mb_error")) +
        " MB in " + plural(g("n_mallocs"), "sample") +
        " (" + fix(g("n_python_fraction") * 100, 0) + "% Python)" +
        (g("n_churn_mb") >= SHOWN ? "\nchurn " + fix(g("n_churn_mb"), 1) + " MB (tiny temporaries, not held)" : "") +
        "\npeak " + fix(g("n_peak_mb"), 1) + " MB · net growth " + fix(g("n_growth_mb"), 1) +
        within(g("n_growth_mb"), g("n_growth_mb_error")) + " MB" +
        "\n" + fix(g("n_usage_fraction") * 100, 1) + "% of all allocation activity · copy " +
        fix(g("n_copy_mb_s"), 1) + " MB/s" + t;
    }
    return "";
  }
  function placeTip(e) {
    var x = e.clientX + 14, y = e.clientY + 14, r = tip.getBoundingClientRect();
    if (x + r.width > innerWidth) x = Math.max(0, e.clientX - r.width - 10);
    if (y + r.height > innerHeight) y = Math.max(0, e.clientY - r.height - 10);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function showTip(text, e) {
    if (!text) { tip.hidden = true; return; }
    tip.textContent = text;
    tip.hidden = false;
    placeTip(e);
  }
  function footprintHover(svg, e) {
    var s = S.samples || [];
    if (!s.length) return;
    var r = svg.getBoundingClientRect(), end = ELAPSED || s[s.length - 1][0] || 1;
    var t = (e.clientX - r.left) / r.width * end, best = 0;
    for (var i = 1; i < s.length; i++) if (Math.abs(s[i][0] - t) < Math.abs(s[best][0] - t)) best = i;
    var cx = (Math.min(s[best][0] / end, 1) * 600).toFixed(1), cursor = svg.querySelector(".cursor");
    cursor.setAttribute("x1", cx);
    cursor.setAttribute("x2", cx);
    showTip("at " + fix(s[best][0], 3) + " s: footprint " + fix(s[best][1], 1) + " MB", e);
  }

  /* ---- the flame graph ----
   * The call stacks (D.flame: render/frames.py's paths, root first, with their
   * synthetic leaf frames "[native]", "[system]"...) added up into a tree and
   * drawn as rows of boxes, the root on top, each as wide as its share.  Click
   * a box to zoom into it, one of the boxes above it (or "all") to zoom out;
   * the search marks every frame whose function or file contains the text and
   * says how much of the view they account for.  No number is made here that
   * the stacks do not hold: a box is the sum of the stacks through it. */

  var FL = D.flame, FLAME_ROW = 18, FLAME_MIN = 0.05;  // boxes narrower than this % are not drawn
  var flame = { metric: 0, root: null, zoom: null, search: "", nodes: [] };
  var FLAME_KIND = ["py", "native", "system", "wait", "other"];

  function flameHtml() {
    if (!FL) {
      return '<section id="flame-section"><h2>Flame graph</h2><p class="muted" id="flame-none">This profile ' +
        "has no call stacks (it was made by an older pyrometer).</p></section>";
    }
    var buttons = FL.metrics.map(function (m, i) {
      return '<button data-metric="' + i + '" aria-pressed="' + (i === 0) + '">' +
        (m[0] === "time" ? "CPU and time" : "memory (allocated)") + "</button>";
    }).join("");
    return '<section id="flame-section"><h2>Flame graph</h2><div class="flame-bar">' + buttons +
      '<input type="search" id="flame-search" placeholder="search functions and files"> ' +
      '<button id="flame-reset">reset zoom</button> <span id="flame-match" class="muted"></span></div>' +
      '<div id="flame-path" class="muted"></div><div id="flame"></div></section>';
  }
  // The tree of every metric at once (node.vs[i]: metric i, the stacks' column
  // i + 1), so that switching metric only redraws.  A child is found by one Map
  // of (parent, frame) for the whole tree: a per-node object keyed by frame
  // numbers took seconds for the 20,000 stacks of a capped profile.  Children
  // are sorted when first drawn for a metric, not all of them up front.
  function flameTree() {
    var nm = FL.metrics.length, zero = function () { var a = []; for (var i = 0; i < nm; i++) a.push(0); return a; };
    var root = { id: 0, f: -1, vs: zero(), kids: [], parent: null, depth: 0, sorted: -1 };
    var child = new Map(), ids = 1, nf = FL.frames.length + 1;
    FL.stacks.forEach(function (s) {
      var node = root, vs = [], any = false, i, c;
      for (c = 0; c < nm; c++) { vs.push(num(s[c + 1], 0)); any = any || vs[c] > 0; }
      if (!any) return;
      for (c = 0; c < nm; c++) root.vs[c] += vs[c];
      for (i = 0; i < s[0].length; i++) {
        var f = s[0][i], key = node.id * nf + f, next = child.get(key);
        if (!next) {
          next = { id: ids++, f: f, vs: zero(), kids: [], parent: node, depth: node.depth + 1, sorted: -1 };
          child.set(key, next);
          node.kids.push(next);
        }
        for (c = 0; c < nm; c++) next.vs[c] += vs[c];
        node = next;
      }
    });
    return root;
  }
  function val(n) { return n.vs[flame.metric]; }
  function kidsOf(n) {  // largest first, then in frame order
    if (n.sorted !== flame.metric) {
      n.sorted = flame.metric;
      var m = flame.metric;
      if (n.kids.length > 1) n.kids.sort(function (a, b) { return b.vs[m] - a.vs[m] || a.f - b.f; });
    }
    return n.kids;
  }
  function frameName(f) {
    if (f < 0) return "all";
    var fr = FL.frames[f];
    return fr[1] ? fr[0] + " (" + fr[1].split("/").pop() + ":" + fr[2] + ")" : String(fr[0]);
  }
  function frameText(f) {  // what the search looks in
    if (f < 0) return "";
    var fr = FL.frames[f];
    return (fr[0] + " " + fr[1] + ":" + fr[2]).toLowerCase();
  }
  function flameValue(v) {
    return FL.metrics[flame.metric][2] === "bytes" ? fix(v / 1048576, 1) + " MB" : secs(v);
  }
  function setFlameMetric(i) {
    flame.metric = i;
    if (!flame.root) flame.root = flameTree();
    flame.zoom = flame.root;
    Array.prototype.forEach.call(document.querySelectorAll("#flame-section [data-metric]"), function (b) {
      b.setAttribute("aria-pressed", String(+b.dataset.metric === i));
    });
    drawFlame();
  }
  function drawFlame() {
    var el = document.getElementById("flame"), zoom = flame.zoom, total = val(zoom) || 1, all = val(flame.root) || 1;
    var q = flame.search.toLowerCase(), parts = [], depth = 0, matched = 0;
    flame.nodes = [];
    function box(n, left, width, matchedAbove) {
      var at = flame.nodes.length, kind = n.f < 0 ? 4 : FL.frames[n.f][3];
      var hit = q && n.f >= 0 && frameText(n.f).indexOf(q) >= 0;
      if (hit && !matchedAbove && n.depth >= zoom.depth) matched += val(n);
      flame.nodes.push(n);
      depth = Math.max(depth, n.depth);
      var style = "left:" + left.toFixed(3) + "%;width:" + width.toFixed(3) + "%;top:" + n.depth * FLAME_ROW + "px";
      if (kind === 0) {  // the program's frames: warm colours, one per function name
        var h = 0, name = String(FL.frames[n.f][0]);
        for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) % 360;
        style += ";background:hsl(" + (20 + h % 35) + ",85%," + (62 + h % 12) + "%)";
      }
      var tip = frameName(n.f) + (n.f >= 0 && FL.frames[n.f][1] ? "\n" + FL.frames[n.f][1] + ":" + FL.frames[n.f][2] : "") +
        "\n" + flameValue(val(n)) + " · " + fix(val(n) / all * 100, 1) + "% of all" +
        (zoom !== flame.root ? " · " + fix(val(n) / total * 100, 1) + "% of the view" : "");
      parts.push('<div class="fb k-' + FLAME_KIND[kind] + (hit ? " match" : "") + (n === zoom ? " zoomed" : "") +
        '" data-n="' + at + '" style="' + style + '" data-tip="' + esc(tip) + '">' + esc(frameName(n.f)) + "</div>");
      return hit;
    }
    var chain = [];
    for (var a = zoom; a; a = a.parent) chain.unshift(a);
    var above = false;
    chain.forEach(function (n) {  // the zoomed box and the ones above it, full width
      var hit = box(n, 0, 100, above);
      if (hit && !above && n.depth < zoom.depth) matched += val(zoom);  // the whole view is under a match
      above = above || hit;
    });
    (function walk(n, left, matchedAbove) {
      kidsOf(n).forEach(function (k) {
        var width = val(k) / total * 100;
        if (width >= FLAME_MIN) walk(k, left, box(k, left, width, matchedAbove) || matchedAbove);
        left += width;
      });
    })(zoom, 0, above);
    el.style.height = (depth + 1) * FLAME_ROW + "px";
    el.innerHTML = parts.join("");
    document.getElementById("flame-path").textContent = zoom === flame.root ? "" :
      "zoomed into " + chain.map(function (n) { return frameName(n.f); }).join(" › ");
    document.getElementById("flame-match").textContent = q ?
      "matched " + flameValue(matched) + " (" + fix(matched / total * 100, 1) + "% of the view)" : "";
  }
  function flameClick(target) {
    var b = target.closest("#flame .fb");
    if (b) {
      var n = flame.nodes[+b.dataset.n];
      flame.zoom = n === flame.zoom && n.parent ? n.parent : n;
      drawFlame();
      return true;
    }
    if (target.closest("#flame-section [data-metric]")) {
      setFlameMetric(+target.closest("[data-metric]").dataset.metric);
      return true;
    }
    if (target.id === "flame-reset") {
      flame.zoom = flame.root;
      drawFlame();
      return true;
    }
    return false;
  }

  /* ---- start ---- */

  app.innerHTML = summaryHtml() + flameHtml() + toolbarHtml() + filesHtml();
  if (FL) setFlameMetric(0);
  FILES.forEach(function (F, fi) {
    F.section = document.getElementById("F" + fi);
    F.head = F.section.firstChild;
    F.body = F.section.lastChild;
  });

  app.addEventListener("click", function (e) {
    var target = e.target;
    if (flameClick(target)) return;
    var go = target.closest("[data-goto]");
    if (go) {
      e.preventDefault();
      var p = go.dataset.goto.split(":");
      goto(+p[0], +p[1]);
      return;
    }
    var th = target.closest(".h [data-c]");
    if (th) { th.closest(".prof")._table.sortBy(+th.dataset.c); return; }
    var head = target.closest(".file-head");
    if (head) {
      var F = FILES[+head.parentNode.dataset.fi];
      setOpen(F, !F.section.classList.contains("open"), true);
      return;
    }
    if (target.id === "tab-lines") showView("lines");
    else if (target.id === "tab-functions") showView("functions");
    else if (target.id === "expand-all") FILES.forEach(function (F) { if (!F.section.hidden) setOpen(F, true); });
    else if (target.id === "collapse-all") FILES.forEach(function (F) { setOpen(F, false); });
  });
  app.addEventListener("keydown", function (e) {
    var head = e.target.closest && e.target.closest(".file-head");
    if (head && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); head.click(); }
  });
  document.getElementById("reduced").addEventListener("change", function (e) { setReduced(e.target.checked); });
  document.getElementById("file-filter").addEventListener("input", applyFilters);
  if (FL) {
    document.getElementById("flame-search").addEventListener("input", function (e) {
      flame.search = e.target.value;
      drawFlame();
    });
  }
  app.addEventListener("mouseover", function (e) {
    var el = e.target.closest("[data-t],[data-tip]");
    if (!el || el.id === "footprint") { if (!el) tip.hidden = true; return; }
    showTip(tipText(el), e);
  });
  app.addEventListener("mousemove", function (e) {
    var svg = e.target.closest("#footprint");
    if (svg) footprintHover(svg, e);
    else if (!tip.hidden) placeTip(e);
  });
  app.addEventListener("mouseleave", function () { tip.hidden = true; });

  // Open the hottest files, as long as their lines stay few enough to draw at once.
  var budget = 4000;
  FILES.forEach(function (F, i) {
    if (i === 0 || (i < 10 && F.raw.percent_cpu_time >= THRESHOLD && F.lines.n <= budget)) {
      budget -= F.lines.n;
      setOpen(F, true, i === 0);
    }
  });
  applyFilters();

  // For tests and for people timing the page: how long the first drawing took,
  // and whether tables are still being filled.
  window.pyrometer = {
    renderMs: performance.now() - t0,
    pending: function () { return queue.length; },
    goto: goto,
    files: FILES.length,
    flame: function () {  // the flame graph's state, for tests
      return FL ? { metric: FL.metrics[flame.metric][0], zoom: frameName(flame.zoom.f), total: val(flame.root),
                    view: val(flame.zoom) } : null;
    },
  };
  document.documentElement.setAttribute("data-ready", "1");
})();
