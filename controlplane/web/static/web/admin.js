// The admin's autocomplete boxes (select2) add a search field with no name of its own; give
// each the name of the list it searches, so screen readers say what it is for.
(function () {
  "use strict";
  function nameOf(container) {
    var select = container && container.previousElementSibling;
    if (select && select.tagName === "SELECT") {
      var label = select.id && document.querySelector('label[for="' + select.id + '"]');
      var text = label ? label.textContent.replace(/:\s*$/, "").trim() : "";
      return "Search " + (text || select.name || "the list");
    }
    return "Search the list";
  }
  function labelSearchFields(root) {
    var fields = (root.querySelectorAll ? root : document).querySelectorAll(
      ".select2-search__field:not([aria-label])"
    );
    fields.forEach(function (field) {
      var container = field.closest(".select2-container");
      // A dropdown's own search box lives apart from its list: name it for the open one.
      var open = document.querySelector(".select2-container--open:not(.select2-dropdown)");
      var owner = container && container.previousElementSibling ? container : open;
      field.setAttribute("aria-label", nameOf(owner));
    });
  }
  function start() {
    labelSearchFields(document);
    new MutationObserver(function () { labelSearchFields(document); }).observe(document.body, {
      childList: true,
      subtree: true,
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
