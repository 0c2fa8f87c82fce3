// hami-web dashboard: the only script. Hovering a GPU cell shows its pods below the heatmap; a click keeps
// them there. Changing a control of a form re-submits it. Everything works without it, only less handily.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const detail = document.getElementById("gpu-detail");
  let kept = null;
  for (const cell of document.querySelectorAll(".heatmap .cell")) {
    cell.addEventListener("mouseenter", () => { if (detail && !kept) detail.textContent = cell.title; });
    cell.addEventListener("click", () => {
      if (kept) kept.classList.remove("selected");
      kept = kept === cell ? null : cell;
      if (kept) kept.classList.add("selected");
      if (detail) detail.textContent = cell.title;
    });
  }
  for (const select of document.querySelectorAll("#heatmap-controls select")) {
    select.addEventListener("change", () => select.form.submit());
  }
});
