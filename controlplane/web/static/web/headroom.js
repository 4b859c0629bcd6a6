// Headroom pages: small progressive enhancements; every page works without this script.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // A search box with data-filter="<tbody selector>" hides rows whose data-key does not match.
  for (const input of document.querySelectorAll("input[data-filter]")) {
    const body = document.querySelector(input.dataset.filter);
    if (!body) continue;
    input.addEventListener("input", () => {
      const wanted = input.value.trim().toLowerCase();
      for (const row of body.rows) {
        const key = (row.dataset.key || "").toLowerCase();
        row.hidden = wanted !== "" && !key.includes(wanted);
      }
    });
  }
  // A preview re-solves the placement: say so while it runs.
  for (const button of document.querySelectorAll("form.whatif button[value=preview]")) {
    button.form.addEventListener("submit", (event) => {
      if (event.submitter === button) {
        button.textContent = "Re-solving…";
        button.setAttribute("aria-busy", "true");
      }
    });
  }
});
