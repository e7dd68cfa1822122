// Refresh the live part of the page from the server without a full reload; the dry-run form
// below it keeps what was typed. No framework, no build step.
(function () {
  var live = document.getElementById("live");
  if (!live) return;
  var seconds = parseInt(live.getAttribute("data-refresh"), 10) || 10;
  function open() {
    var keys = [];
    live.querySelectorAll("details[open]").forEach(function (d) {
      var card = d.closest("[data-card]"), node = d.closest("[data-node]"), pod = d.closest("[data-pod]");
      keys.push((node ? node.getAttribute("data-node") : "") + "|" + (card ? card.getAttribute("data-card") : "") +
                "|" + (pod ? pod.getAttribute("data-pod") : ""));
    });
    return keys;
  }
  function reopen(keys) {
    live.querySelectorAll("details").forEach(function (d) {
      var card = d.closest("[data-card]"), node = d.closest("[data-node]"), pod = d.closest("[data-pod]");
      var key = (node ? node.getAttribute("data-node") : "") + "|" + (card ? card.getAttribute("data-card") : "") +
                "|" + (pod ? pod.getAttribute("data-pod") : "");
      if (keys.indexOf(key) >= 0) d.open = true;
    });
  }
  function tick() {
    fetch(live.getAttribute("data-url"), {cache: "no-store"}).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var keys = open();
      live.innerHTML = html;
      reopen(keys);
      live.setAttribute("data-refreshed", String(Date.now()));
    }).catch(function () { /* keep the last view; try again next time */ })
      .finally(function () { setTimeout(tick, seconds * 1000); });
  }
  setTimeout(tick, seconds * 1000);
})();
