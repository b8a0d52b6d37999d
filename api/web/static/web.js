// dsdoctor pages: small enhancements only; every page works without this file.
(function () {
  "use strict";
  var body = document.body;

  // Filters of the search form: apply a changed select or date at once.
  document.querySelectorAll("form[data-autosubmit]").forEach(function (form) {
    form.querySelectorAll("select, input[type=date]").forEach(function (input) {
      input.addEventListener("change", function () {
        if (form.requestSubmit) { form.requestSubmit(); } else { form.submit(); }
      });
    });
  });

  // Long-running forms: disable the submit button and say that work is in progress.
  document.querySelectorAll("form[data-busy]").forEach(function (form) {
    form.addEventListener("submit", function () {
      var button = form.querySelector("button[type=submit]");
      if (button) {
        button.disabled = true;
        button.textContent = body.getAttribute("data-busy-label") || button.textContent;
      }
      form.setAttribute("aria-busy", "true");
    });
  });

  // Copy buttons on commands and config snippets.
  if (navigator.clipboard) {
    document.querySelectorAll("pre[data-copy]").forEach(function (pre) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "copy-button";
      button.textContent = body.getAttribute("data-copy-label") || "Copy";
      button.addEventListener("click", function () {
        navigator.clipboard.writeText(pre.innerText.replace(/\n?$/, "")).then(function () {
          button.textContent = body.getAttribute("data-copied-label") || "Copied";
          setTimeout(function () { button.textContent = body.getAttribute("data-copy-label") || "Copy"; }, 1500);
        });
      });
      pre.appendChild(button);
    });
  }

  // Causal graphs: pointing at a node dims everything not connected to it.
  document.querySelectorAll("svg.causal-graph").forEach(function (svg) {
    var edges = Array.prototype.slice.call(svg.querySelectorAll(".edge"));
    var nodes = Array.prototype.slice.call(svg.querySelectorAll(".node"));
    function reach(id, from, to, keep) {  // follow edges one way, from node id
      edges.forEach(function (e) {
        if (e.getAttribute(from) === id && !keep[e.getAttribute(to)]) {
          keep[e.getAttribute(to)] = true;
          reach(e.getAttribute(to), from, to, keep);
        }
      });
      return keep;
    }
    function connected(id) {  // the paths through a node: towards the causes and towards the symptoms
      var keep = reach(id, "data-to", "data-from", {});
      reach(id, "data-from", "data-to", keep);
      keep[id] = true;
      return keep;
    }
    function focus(id) {
      var keep = connected(id);
      nodes.forEach(function (n) { n.classList.toggle("dim", !keep[n.getAttribute("data-node")]); });
      edges.forEach(function (e) {
        e.classList.toggle("dim", !(keep[e.getAttribute("data-from")] && keep[e.getAttribute("data-to")]));
      });
    }
    function clear() {
      nodes.forEach(function (n) { n.classList.remove("dim"); });
      edges.forEach(function (e) { e.classList.remove("dim"); });
    }
    nodes.forEach(function (n) {
      n.addEventListener("mouseenter", function () { focus(n.getAttribute("data-node")); });
      n.addEventListener("mouseleave", clear);
      n.addEventListener("focusin", function () { focus(n.getAttribute("data-node")); });
      n.addEventListener("focusout", clear);
    });
  });
})();
