(function () {
  var table = document.getElementById('students');
  if (!table) return;
  var body = table.tBodies[0], text = document.getElementById('filter'),
      group = document.getElementById('group'), shown = document.getElementById('shown');
  function key(row, i, numeric) {
    var c = row.cells[i], v = c.getAttribute('data-v');
    if (v === null) v = c.textContent.trim();
    if (!numeric) return v.toLowerCase();
    var x = parseFloat(v);
    return isNaN(x) ? -Infinity : x;
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    if (!th.hasAttribute('data-col')) return;
    th.addEventListener('click', function () {
      var i = th.cellIndex, numeric = th.getAttribute('data-type') === 'num',
          dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, i, numeric), y = key(b, i, numeric);
        return x < y ? -dir : x > y ? dir : 0;
      });
      rows.forEach(function (r) { body.appendChild(r); });
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
    });
  });
  function apply() {
    var q = text.value.trim().toLowerCase(), g = group.value, n = 0;
    Array.prototype.forEach.call(body.rows, function (r) {
      var ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) &&
               (!g || (' ' + r.getAttribute('data-groups') + ' ').indexOf(' ' + g + ' ') >= 0);
      r.hidden = !ok;
      if (ok) n++;
    });
    shown.textContent = n;
  }
  text.addEventListener('input', apply);
  group.addEventListener('change', apply);
  document.getElementById('clear').addEventListener('click', function () {
    text.value = ''; group.value = ''; apply();
  });
  Array.prototype.forEach.call(document.querySelectorAll('[data-show-group]'), function (b) {
    b.addEventListener('click', function () {
      group.value = b.getAttribute('data-show-group'); apply(); table.scrollIntoView();
    });
  });
  apply();
})();
