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
  // A what-if waiting or being solved: poll its progress, then show the page with its preview.
  const progress = document.querySelector("[data-poll]");
  if (progress) {
    const text = progress.querySelector(".progress-text");
    const poll = async () => {
      try {
        const answer = await fetch(progress.dataset.poll, {headers: {Accept: "application/json"}});
        if (answer.ok) {
          const state = await answer.json();
          if (text) text.textContent = state.message;
          if (state.done) {
            window.location.reload();
            return;
          }
        }
      } catch (error) {
        // A dropped connection: try again at the next tick.
      }
      window.setTimeout(poll, 1000);
    };
    window.setTimeout(poll, 500);
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
