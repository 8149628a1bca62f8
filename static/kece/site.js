// Page behaviour that htmx attributes do not express on their own.
(function () {
  "use strict";

  // Parts of a page that refresh themselves (hx-trigger) carry `data-announce`, the sentence
  // that sums them up, and `data-announce-to`, the id of a polite live region. The region
  // hears the sentence only when it changes, not on every refresh.
  var announced = {};
  function each(fn) {
    var parts = document.querySelectorAll("[data-announce-to]");
    for (var i = 0; i < parts.length; i++) { fn(parts[i]); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    each(function (part) { announced[part.getAttribute("data-announce-to")] = part.getAttribute("data-announce"); });
  });
  // htmx:load fires on the swapped-in content (the old element is already detached).
  document.addEventListener("htmx:load", function () {
    each(function (part) {
      var to = part.getAttribute("data-announce-to");
      var sentence = part.getAttribute("data-announce");
      var live = document.getElementById(to);
      if (live && sentence !== announced[to]) {
        announced[to] = sentence;
        live.textContent = sentence;
      }
    });
  });

  // Submit forms: the language select shows its runtime's live status next to it.
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!select.matches || !select.matches("select[data-status-for]")) { return; }
    var option = select.options[select.selectedIndex];
    var target = document.getElementById(select.getAttribute("data-status-for"));
    if (target && option) { target.textContent = option.getAttribute("data-status") || ""; }
  });
})();
