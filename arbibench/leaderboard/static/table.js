// Sorting and searching of the leaderboard tables; works offline, no libraries.
(function () {
  "use strict";

  function cellValue(row, index, type) {
    var cell = row.cells[index];
    var raw = cell ? cell.getAttribute("data-value") : null;
    if (raw === null || raw === "") return null;
    return type === "num" ? parseFloat(raw) : raw.toLowerCase();
  }

  function sortBy(table, th) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var type = th.getAttribute("data-type") || "text";
    var current = th.getAttribute("aria-sort");
    var dir = current === "descending" ? "ascending" : current === "ascending" ? "descending"
      : (th.getAttribute("data-first") || "ascending");
    table.querySelectorAll("th[aria-sort]").forEach(function (other) { other.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var body = table.tBodies[0];
    var rows = Array.prototype.filter.call(body.rows, function (r) { return !r.classList.contains("empty"); });
    var sign = dir === "ascending" ? 1 : -1;
    rows.forEach(function (r, i) { r._pos = i; });
    rows.sort(function (a, b) {
      var x = cellValue(a, index, type), y = cellValue(b, index, type);
      if (x === null && y === null) return a._pos - b._pos;
      if (x === null) return 1;  // missing values last, whichever the direction
      if (y === null) return -1;
      if (x < y) return -sign;
      if (x > y) return sign;
      return a._pos - b._pos;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    var empty = body.querySelector("tr.empty");
    if (empty) body.appendChild(empty);
  }

  function filter(table, input, counter, size) {
    var terms = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    var wanted = size ? size.value : "";
    var body = table.tBodies[0], shown = 0, total = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      if (r.classList.contains("empty")) return;
      total += 1;
      var text = (r.getAttribute("data-search") || r.textContent).toLowerCase();
      var match = terms.every(function (t) { return text.indexOf(t) !== -1; }) &&
        (!wanted || r.getAttribute("data-size") === wanted);
      r.hidden = !match;
      if (match) shown += 1;
    });
    var empty = body.querySelector("tr.empty");
    if (empty) empty.hidden = shown !== 0;
    if (counter) counter.textContent = shown === total ? total + " models" : shown + " of " + total + " models";
  }

  document.querySelectorAll("table.board").forEach(function (table) {
    table.querySelectorAll("th.sortable").forEach(function (th) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, th); }
      });
    });
    var input = document.querySelector('input.search[data-table="' + table.id + '"]');
    var counter = document.querySelector('.count[data-table="' + table.id + '"]');
    var size = document.querySelector('select.size-filter[data-table="' + table.id + '"]');
    if (input) {
      input.addEventListener("input", function () { filter(table, input, counter, size); });
      if (size) size.addEventListener("change", function () { filter(table, input, counter, size); });
      filter(table, input, counter, size);
    }
  });
})();
