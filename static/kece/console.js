// The console's live channel: the server says which pools changed, the page re-fetches its
// parts (elements with hx-trigger="judgers-changed from:body"). While the socket is down the
// page says so and its parts refresh every 10 s on their own (window.keceLive is false).
// While nothing changes the server still says it is alive every few seconds: a socket that
// stays silent longer (silentAfterMs, sent with "live") is taken for deaf, whatever link
// broke, and replaced. After that the page calls itself live again only once a message has
// come through the whole way, not merely when a new socket opens.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  if (!status || window.keceConsole) { return; }
  window.keceConsole = true;
  var delay = 1000;
  var trusted = true;  // no socket has gone deaf since the last message came through

  function show(live) {
    var wasLive = window.keceLive === true;
    window.keceLive = live;
    status.className = "live-status " + (live ? "is-live" : "is-down");
    status.querySelector(".icon").className = "icon " + (live ? "icon-ok" : "icon-queue");
    status.querySelector(".words").textContent = status.getAttribute(live ? "data-live" : "data-reconnecting");
    if (live && !wasLive) { refresh(); }  // catch up on what changed while it was down
  }
  function refresh() { if (window.htmx) { htmx.trigger(document.body, "judgers-changed"); } }

  function connect() {
    var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/admin/judgers");
    var silentAfter = 0;
    var watchdog = null;

    function heard() {
      window.clearTimeout(watchdog);
      if (silentAfter > 0) { watchdog = window.setTimeout(deaf, silentAfter); }
    }
    function deaf() {
      trusted = false;
      socket.onmessage = socket.onclose = null;
      socket.close();
      closed();
    }
    function closed() {
      window.clearTimeout(watchdog);
      show(false);
      window.setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    }
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "live") {
        silentAfter = message.silentAfterMs || 0;
        if (trusted) { delay = 1000; show(true); }
      } else {
        trusted = true;
        delay = 1000;
        if (window.keceLive) { if (message.type === "changed") { refresh(); } } else { show(true); }
      }
      heard();
    };
    socket.onclose = closed;
  }
  window.keceLive = false;
  connect();
  // While the socket is down the parts refresh every 10 s (`kece-offline-poll`); sent from
  // here rather than as an htmx trigger filter, which htmx evaluates as script source and
  // the site's Content-Security-Policy refuses.
  window.setInterval(function () {
    if (window.keceLive !== true && window.htmx) { htmx.trigger(document.body, "kece-offline-poll"); }
  }, 10000);

  // A live part is not replaced while the operator is inside it (the focus in it, or one of
  // its menus open): the swap would take the focus away and close the menu, every few
  // seconds on a busy fleet. It catches up once they have left it.
  var held = false;
  function busy(part) {
    var focused = document.activeElement;
    return (focused && focused !== document.body && part.contains(focused)) || !!part.querySelector("details[open]");
  }
  function isLivePart(element) {
    return !!element && (element.getAttribute("hx-trigger") || "").indexOf("judgers-changed") >= 0;
  }
  document.body.addEventListener("htmx:beforeRequest", function (event) {
    var part = event.detail && event.detail.elt;
    if (isLivePart(part) && busy(part)) { event.preventDefault(); held = true; }
  });
  // An answer asked for before the operator went in is not put in either.
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    var part = event.detail && event.detail.elt;
    if (isLivePart(part) && busy(part)) { event.detail.shouldSwap = false; held = true; }
  });
  function catchUp() {
    // After the focus has settled: leaving one link for the next inside the part is staying.
    window.setTimeout(function () { if (held) { held = false; refresh(); } }, 0);
  }
  document.addEventListener("focusout", catchUp);
  document.addEventListener("toggle", function (event) { if (!event.target.open) { catchUp(); } }, true);

  // The join code: copy button and its expiry counting down.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) { return; }
    var text = document.getElementById(button.getAttribute("data-copy")).textContent;
    navigator.clipboard.writeText(text).then(function () { button.textContent = button.getAttribute("data-copied"); });
  });
  var countdowns = document.querySelectorAll("[data-countdown]");
  function tick() {
    for (var i = 0; i < countdowns.length; i++) {
      var left = Math.floor((Date.parse(countdowns[i].getAttribute("data-countdown")) - Date.now()) / 1000);
      countdowns[i].textContent = left <= 0 ? countdowns[i].getAttribute("data-expired")
        : Math.floor(left / 60) + ":" + ("0" + (left % 60)).slice(-2);
    }
  }
  if (countdowns.length) { tick(); window.setInterval(tick, 1000); }
})();
