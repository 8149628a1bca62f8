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

  // Parts that refresh only while the page is visible (`data-poll-visible="N"`): each is
  // sent `kece-poll` every N s while it is, and at once when the page becomes visible again.
  // (htmx's own `every Ns [condition]` evaluates the condition as script source, which the
  // site's Content-Security-Policy refuses.) A part swapped in starts its own count.
  var due = new WeakMap();
  function pollParts(now, all) {
    var parts = document.querySelectorAll("[data-poll-visible]");
    for (var i = 0; i < parts.length; i++) {
      var part = parts[i];
      var every = parseFloat(part.getAttribute("data-poll-visible")) * 1000;
      if (!due.has(part) && !all) { due.set(part, now + every); continue; }
      if (all || now >= due.get(part)) {
        due.set(part, now + every);
        if (window.htmx) { htmx.trigger(part, "kece-poll"); }
      }
    }
  }
  window.setInterval(function () {
    if (document.visibilityState === "visible") { pollParts(Date.now(), false); }
  }, 250);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { pollParts(Date.now(), true); }
  });

  // The code editor (a textarea with `data-code-editor`). Tab indents the line or the lines
  // selected, Shift+Tab takes an indent back, as in every code editor: a Tab that moved on
  // to the Submit button made the next key send half-written code. Esc, then Tab, leaves
  // the editor (so the keyboard is never trapped in it; the hint under it says so).
  var INDENT = "    ";
  var leaving = false;
  function lineStart(text, at) { return text.lastIndexOf("\n", at - 1) + 1; }
  function indent(editor, back) {
    var text = editor.value, start = editor.selectionStart, end = editor.selectionEnd;
    if (!back && start === end) {
      if (!document.execCommand || !document.execCommand("insertText", false, INDENT)) {
        editor.setRangeText(INDENT, start, end, "end");
      }
      return;
    }
    var first = lineStart(text, start);
    var lines = text.slice(first, end).split("\n");
    var changed = lines.map(function (line) {
      if (!back) { return INDENT + line; }
      var spaces = line.match(/^ {0,4}/)[0].length;
      return line.slice(line.charAt(0) === "\t" ? 1 : spaces);
    }).join("\n");
    editor.setSelectionRange(first, end);
    if (!document.execCommand || !document.execCommand("insertText", false, changed)) {
      editor.setRangeText(changed, first, end, "select");
    } else {
      editor.setSelectionRange(first, first + changed.length);
    }
  }
  document.addEventListener("keydown", function (event) {
    var editor = event.target;
    if (!editor.matches || !editor.matches("textarea[data-code-editor]")) { return; }
    if (event.key === "Escape") { leaving = true; return; }
    if (event.key !== "Tab" || event.ctrlKey || event.altKey || event.metaKey) { leaving = false; return; }
    if (leaving) { leaving = false; return; }  // Esc, then Tab: the focus moves on
    event.preventDefault();
    indent(editor, event.shiftKey);
  });

  // What a student typed is kept for the tab's life (`sessionStorage`, per account,
  // problem and exam or practice): a reload or the language switch no longer loses it. Not
  // kept past the tab: a lab machine's next student must not find it.
  document.addEventListener("DOMContentLoaded", function () {
    var editor = document.querySelector("textarea[data-draft-key]");
    if (!editor || !window.sessionStorage) { return; }
    var key = editor.getAttribute("data-draft-key");
    var language = editor.form && editor.form.querySelector("select[name=language]");
    var saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(key) || "null"); } catch (ignored) { saved = null; }
    if (saved && saved.code && !editor.value.trim()) {
      editor.value = saved.code;
      if (language && saved.language && language.querySelector("option[value='" + saved.language + "']")) {
        language.value = saved.language;
        language.dispatchEvent(new Event("change", {bubbles: true}));
      }
      var note = document.getElementById("draft-note");
      if (note) { note.textContent = editor.getAttribute("data-draft-restored"); }
    }
    // The same code sent again from this page (Back, then Submit) goes under the key it was
    // first sent with, so the server answers with that submission instead of making a
    // second one (in an ACM exam, another attempt). Other code goes under a key never sent:
    // the page's own, or a new one when the page's own was (a page the browser kept).
    var keyField = editor.form && editor.form.querySelector("input[name=idempotency_key]");
    var rendered = keyField ? keyField.value : "";
    var sent = saved && saved.sentKey ? {key: saved.sentKey, code: saved.sentCode} : null;
    var made = null;
    function newKey() {
      var bytes = new Uint8Array(24);
      window.crypto.getRandomValues(bytes);
      return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
    }
    function chooseKey() {
      if (!keyField || !window.crypto) { return; }
      if (sent && editor.value === sent.code) { keyField.value = sent.key; return; }
      keyField.value = (sent && sent.key === rendered) ? (made = made || newKey()) : rendered;
    }
    function keep() {
      try {
        sessionStorage.setItem(key, JSON.stringify({code: editor.value, language: language ? language.value : "",
                                                    sentKey: sent && sent.key, sentCode: sent && sent.code}));
      } catch (ignored) { /* storage full or refused: the page works as before */ }
    }
    // A page that refused the post comes with a fresh key of its own: that one is used.
    if (!document.getElementById("submit-refused")) { chooseKey(); }
    editor.addEventListener("input", function () { keep(); chooseKey(); });
    if (language) { language.addEventListener("change", keep); }
    window.addEventListener("pageshow", function (event) { if (event.persisted) { chooseKey(); } });
    if (editor.form && keyField) {
      editor.form.addEventListener("submit", function () { sent = {key: keyField.value, code: editor.value}; keep(); });
    }
  });

  // An exam's answers (`form[data-autosave]`) are saved as they are ticked: a tick left
  // unsaved was lost at the end of the exam, or when another question was saved. The form
  // is posted as its button would post it; the status beside the button says how it went,
  // and leaving the page with a change not saved asks first.
  var unsaved = false;
  function autosave(form) {
    var state = form.querySelector(".save-state");
    unsaved = true;
    if (state) { state.textContent = form.getAttribute("data-saving"); }
    // getAttribute: `form.action` is the input named "action", not the form's address.
    fetch(form.getAttribute("action"), {method: "POST", body: new FormData(form), credentials: "same-origin"})
      .then(function (answer) {
        unsaved = !answer.ok;
        if (state) { state.textContent = form.getAttribute(answer.ok ? "data-saved" : "data-unsaved"); }
      })
      .catch(function () { if (state) { state.textContent = form.getAttribute("data-unsaved"); } });
  }
  document.addEventListener("change", function (event) {
    var form = event.target.form;
    if (form && form.hasAttribute("data-autosave") && window.fetch && window.FormData) { autosave(form); }
  });
  window.addEventListener("beforeunload", function (event) {
    if (unsaved) { event.preventDefault(); event.returnValue = ""; }
  });
  document.addEventListener("submit", function (event) {
    if (event.target.hasAttribute && event.target.hasAttribute("data-autosave")) { unsaved = false; }
  });

  // An open exam's time left (`.exam-clock`), counted from the server's time when the page
  // was made (a student's clock may be wrong), with a polite warning five minutes and one
  // minute before the end.
  document.addEventListener("DOMContentLoaded", function () {
    var clock = document.querySelector(".exam-clock[data-ends-at]");
    if (!clock) { return; }
    var skew = Date.parse(clock.getAttribute("data-server-now")) - Date.now();
    var ends = Date.parse(clock.getAttribute("data-ends-at"));
    var words = clock.querySelector(".words"), warning = clock.querySelector(".exam-warning");
    // Only a threshold crossed while the page is open is announced, not one already past.
    var leftAtLoad = (ends - (Date.now() + skew)) / 1000;
    var warned = {5: leftAtLoad <= 5 * 60, 1: leftAtLoad <= 60};
    function pad(n) { return ("0" + n).slice(-2); }
    function tick() {
      var left = Math.floor((ends - (Date.now() + skew)) / 1000);
      if (left <= 0) {
        words.textContent = clock.getAttribute("data-ended");
        warning.textContent = clock.getAttribute("data-ended");
        return false;
      }
      var h = Math.floor(left / 3600), m = Math.floor(left % 3600 / 60), sec = left % 60;
      words.textContent = clock.getAttribute("data-left").replace("{time}", (h ? h + ":" + pad(m) : m) + ":" + pad(sec));
      [5, 1].forEach(function (minutes) {
        if (left <= minutes * 60 && !warned[minutes]) {
          warned[minutes] = true;
          warning.textContent = clock.getAttribute("data-warn-" + minutes);
        }
      });
      return true;
    }
    if (tick()) {
      var timer = window.setInterval(function () { if (!tick()) { window.clearInterval(timer); } }, 1000);
    }
  });

  // A bar's length is its share (`data-share`, 0–100), set here: the site's
  // Content-Security-Policy allows no style written in the page.
  function sizeBars(root) {
    var bars = root.querySelectorAll(".bar[data-share]");
    for (var i = 0; i < bars.length; i++) { bars[i].style.width = bars[i].getAttribute("data-share") + "%"; }
  }
  document.addEventListener("DOMContentLoaded", function () { sizeBars(document); });
  document.addEventListener("htmx:load", function (event) { sizeBars(event.target); });

  // Submit forms: the language select shows its runtime's live status next to it.
  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!select.matches || !select.matches("select[data-status-for]")) { return; }
    var option = select.options[select.selectedIndex];
    var target = document.getElementById(select.getAttribute("data-status-for"));
    if (target && option) { target.textContent = option.getAttribute("data-status") || ""; }
  });

  // A table or a block of text wider than its box scrolls sideways: it is a named region the
  // keyboard can reach (Tab, then the arrow keys), named after its caption or the heading
  // above it. Looked at again when the page's width or content changes.
  function headingBefore(element) {
    var caption = element.querySelector("caption");
    if (caption) { return caption.textContent.trim(); }
    var headings = document.querySelectorAll("h1, h2, h3");
    for (var i = headings.length - 1; i >= 0; i--) {
      if (headings[i].compareDocumentPosition(element) & Node.DOCUMENT_POSITION_FOLLOWING) {
        return headings[i].textContent.trim();
      }
    }
    return "";
  }
  function markScrollers() {
    var boxes = document.querySelectorAll(".table-wrap, pre.output");
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      if (box.scrollWidth > box.clientWidth + 1) {
        if (!box.hasAttribute("tabindex")) { box.setAttribute("tabindex", "0"); box.setAttribute("data-scroller", ""); }
        if (!box.hasAttribute("role")) { box.setAttribute("role", "region"); }
        if (!box.hasAttribute("aria-label") && !box.hasAttribute("aria-labelledby")) {
          box.setAttribute("aria-label", headingBefore(box));
        }
      } else if (box.hasAttribute("data-scroller")) {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
        box.removeAttribute("data-scroller");
      }
    }
  }
  // A form sent back refused: the first field it refused has the focus, its message tied to
  // it (aria-describedby), so that a keyboard or a screen reader starts where the fix is.
  document.addEventListener("DOMContentLoaded", function () {
    var refused = document.querySelector("main [aria-invalid='true']");
    if (refused) { refused.focus(); }
  });

  var resizing = null;
  document.addEventListener("DOMContentLoaded", markScrollers);
  document.addEventListener("htmx:load", markScrollers);
  window.addEventListener("resize", function () {
    window.clearTimeout(resizing);
    resizing = window.setTimeout(markScrollers, 150);
  });
})();
