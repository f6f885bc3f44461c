/* Radial Screen clinician page: choose or drop fundus photographs, send them to the service, show the
   screening outcome as the headline (the service's `outcome`, computed in one place server-side), then
   probability and uncertainty in the words the service sent (`words`, models/outcome/wording.py: the probability
   beside the referral threshold, the uncertainty low or high beside the grader-review threshold; the same
   words as the API's outcome_reason, FHIR, the SR and the batch CSV) and image quality. A referable finding
   is never green. On a deferral the probability is never worded as a finding: an ungradable image's is
   "not graded", an uncertain image's is shown small, as the model's uncertain estimate. Plain browser JavaScript, no build step, no network access
   beyond this service. The API key lives only in this tab's memory. */
"use strict";

(function () {
  const BATCH_LIMIT = 16; // the service's default max images per /v1/predict/batch call

  const REASONS = {
    uncertain: "the model is uncertain about this image",
    image_quality: "image quality too low to grade",
  };
  // The four screening outcomes (models.outcome.decision.ScreeningOutcome): headline, colour class, what to do.
  const OUTCOMES = {
    refer_referable_dr: { cls: "outcome-refer", headline: "Refer to an eye-care professional",
      sub: "The probability is at or above the referral threshold and the image is gradable. A clinician must still review this result." },
    grader_review_uncertain: { cls: "outcome-review", headline: "Human grader review needed",
      sub: "The model is uncertain about this image: a trained grader must grade it. This is not a result." },
    retake_ungradable: { cls: "outcome-retake", headline: "Retake the photograph",
      sub: "The image cannot be graded. No finding was made; take a new photograph and screen again." },
    no_referable_dr: { cls: "outcome-clear", headline: "No referable diabetic retinopathy found",
      sub: "Rescreen at the routine interval. A clinician must still review this result." },
  };
  const ISSUES = {
    no_field_of_view: "no circular field of view found",
    too_dark: "too dark",
    overexposed: "overexposed",
    blurred: "blurred or out of focus",
    not_fundus: "does not look like a fundus photograph",
    obstructed: "partly covered (eyelid or eyelash shadow)",
    compression_artifacts: "heavy compression artefacts (re-send the original photograph)",
  };
  /** The gate's measures in plain words (docs/quality-gate.md), for the reasons shown under a refusal. */
  const MEASURES = {
    fov_inlier_share: "share of the field-of-view edge on one circle",
    fov_arc_support: "share of the visible circle traced by the edge",
    fov_visible_arc: "share of the circle inside the frame",
    fov_arc_quadrants: "quadrants with a visible edge",
    fov_offset: "distance of the circle's centre from the frame's centre (radii)",
    fov_iou: "overlap of the bright region with the circle",
    fov_radius: "circle radius / half the frame's short side",
    mean_luma: "mean brightness",
    saturated_fraction: "share of burnt-out (near-white) pixels",
    shadow_fraction: "share of the disc in shadow",
    deep_shadow_fraction: "share of the disc in deep shade (far darker than its lit part)",
    sharpness: "sharpness (vessel-scale over coarse detail)",
    patch_sharpness: "sharpness of the typical patch of the retina (text or a glint cannot lift it)",
    red_share: "red share of the colour",
    red_over_green: "red / green",
    blockiness: "JPEG block-grid strength",
  };
  const PROBLEMS = {
    "undecodable-image": "The image could not be read: the file is damaged, incomplete or not an image.",
    "image-too-small": "The image is too small to assess.",
    "unauthorized": "The API key is missing or wrong. Enter it under “Connection settings”.",
    "payload-too-large": "The file is too large for the service.",
    "image-too-large": "The image has too many pixels for the service.",
    "image-too-complex": "The image file is too costly to decode (unusual encoding). Re-send the camera's original JPEG.",
    "extreme-aspect-ratio": "The image is far wider than it is tall (or the reverse): it is not a fundus photograph frame.",
    "request-timeout": "The upload was too slow and was stopped. Check the connection and try again.",
    "unsupported-media-type": "This file type is not accepted. Use JPEG, PNG, TIFF, WebP, BMP or a DICOM photograph.",
    "multi-frame-image": "Animated or multi-page images are not accepted. Send a single photograph.",
    "validation-error": "The request was not valid.",
    "overloaded": "The service is busy right now.",
    "not-ready": "The model is still loading.",
    "not-acceptable": "This output format is not available.",
    "internal-error": "The service failed unexpectedly. The problem has been logged; please try again.",
  };

  // The result's one-line disclaimer; the model's provenance is shown once, in its panel (the API's `disclaimer`
  // repeats the training data in full).
  const DISCLAIMER = "Decision support only, not a diagnosis. A clinician must review every result.";

  const $ = (id) => document.getElementById(id);
  const state = { files: [], urls: [], model: null };

  /* ---------- helpers ---------- */

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "style") Object.assign(node.style, value); // CSSOM: allowed under a strict CSP
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const pct = (p) => `${(100 * p).toFixed(1)}%`;
  const nat = (x) => (x >= 0.01 ? x.toFixed(3) : x >= 1e-4 || x === 0 ? x.toFixed(4) : x.toExponential(1));

  /** A thumbnail, or a "no preview" box when the browser cannot draw the file. */
  function thumb(url, alt, cls) {
    const img = el("img", { class: cls, src: url, alt });
    img.addEventListener("error", () => img.replaceWith(el("span", { class: `${cls || ""} no-preview` }, "No preview")));
    return img;
  }

  function headers(extra) {
    const h = Object.assign({ Accept: "application/json" }, extra || {});
    const key = $("api-key").value.trim();
    if (key) h["X-API-Key"] = key;
    return h;
  }

  const outcomeOf = (body) => OUTCOMES[body.outcome] ||
    { cls: "outcome-review", headline: "Unknown outcome: human review needed", sub: String(body.outcome) };

  /** Uncertainty's level, the decision's own comparison: high = the server found it above the calibrated
   *  threshold (its "uncertain" reason), else low. The words are the server's (`words.uncertainty`). */
  function uncertaintyLevel(result) {
    return (result.referral_reasons || []).includes("uncertain") ? "high" : "low";
  }

  const deferralText = (body) => (body.referral_reasons || []).map((r) => REASONS[r] || r.replace(/_/g, " ")).join("; ");

  /** Pass/fail with the failed checks: the score itself is not a measure of how good a photograph is. */
  function qualityText(q, words) {
    if (q.gradable) return "Gradable: passed every quality check";
    if (words && words.retake_reason) return `Not gradable: ${words.retake_reason}`;  // the service's words
    const issues = (q.issues || []).map((i) => ISSUES[i] || i.replace(/_/g, " "));
    return "Not gradable" + (issues.length ? `: ${issues.join("; ")}` : "");
  }

  /** Why the gate refused the photograph: each measure that missed, its value and the threshold (or null). */
  function qualityWhy(q) {
    const details = q.gradable ? [] : (q.details || []);
    if (!details.length) return null;
    const num = (v) => (Math.abs(v) >= 10 ? v.toFixed(0) : Number(v.toPrecision(3)).toString());
    return el("ul", { class: "quality-why" }, details.map((d) =>
      el("li", { "data-issue": d.issue, "data-measure": d.measure },
        `${ISSUES[d.issue] || d.issue.replace(/_/g, " ")}: ${MEASURES[d.measure] || d.measure.replace(/_/g, " ")} ` +
        `${num(d.value)}, needs ${d.relation === ">=" ? "at least" : "at most"} ${num(d.threshold)}`)));
  }

  /** What the quality score is, so that it is not read as a grade of image quality. */
  const qualityScoreNote = (q) =>
    `Quality score ${q.score.toFixed(2)}: the smallest of the per-check margins, 0.50 exactly at a check's ` +
    "threshold (gradable at 0.50 or more). It stops rising once every check passes comfortably (the " +
    "obstruction check caps it), so photographs with the same score are not equally good: it says pass or " +
    "fail and how close the nearest check was, not how good the image is.";

  /** A problem+json body (or a network failure) in plain words. */
  async function problemText(response) {
    let problem = null;
    try { problem = await response.json(); } catch (_) { /* not JSON */ }
    const slug = problem && typeof problem.type === "string" ? problem.type.split("/").pop() : "";
    let text = PROBLEMS[slug] || (problem && problem.title) || `The service answered ${response.status}.`;
    if (response.status === 401) askForKey();
    const retry = response.headers.get("Retry-After");
    if (retry && response.status === 503) text += ` Please try again in ${retry} seconds.`;
    return { text, detail: problem && problem.detail, requestId: problem && problem.request_id };
  }

  /** Open the connection settings so a 401 can be fixed where it is explained. */
  function askForKey() { $("settings").open = true; markKeyRequired(); }

  /** The server answered 401: say so on the field itself. */
  function markKeyRequired() {
    $("api-key-label").textContent = "API key (required by this server; sent as X-API-Key, kept only in this tab)";
    $("api-key").required = true;
    $("settings-summary").textContent = "Connection settings (API key required)";
  }

  function showError(info) {
    const box = $("error");
    box.replaceChildren(
      el("p", { class: "error-text" }, el("strong", {}, info.text)),
      info.detail ? el("p", { class: "error-detail" }, `Details: ${info.detail}`) : null,
      info.requestId ? el("p", { class: "meta" }, `Request id: ${info.requestId}`) : null,
    );
    box.hidden = false;
  }

  function clearError() { $("error").hidden = true; $("error").replaceChildren(); }

  /* ---------- gauges ---------- */

  /** A horizontal bar with a threshold marker; value and threshold on a 0..max scale. */
  function gauge(kind, value, threshold, max, label, small) {
    const at = (x) => `${Math.max(0, Math.min(100, (100 * x) / max))}%`;
    return el("div", { class: `gauge ${kind}${small ? " small" : ""}`, role: "img", "aria-label": label },
      el("div", { class: "fill", style: { width: at(value) } }),
      el("div", { class: "marker", style: { left: at(threshold) } }),
      small ? null : el("span", { class: "marker-label", style: { left: at(threshold) } }, "threshold"));
  }

  /** MI bars share one fixed scale on every row: 0 to twice the calibrated threshold (marker in the
      middle); a value beyond it fills the bar. The raw MI is in the text and the tooltip. */
  const miScale = (threshold) => 2 * threshold;

  /* ---------- rendering ---------- */

  function outcomeHeadline(body, id) {
    const o = outcomeOf(body);
    return el("div", { class: `decision ${o.cls}`, id, "data-outcome": body.outcome },
      el("span", { class: "outcome-headline" }, o.headline),
      el("small", {}, o.sub));
  }

  /** Ungradable: no number. Uncertain: the number small, as an uncertain estimate, never as a finding. */
  function probabilityBlock(d, q, outcome, words) {
    if (!q.gradable || outcome === "retake_ungradable") {
      return el("div", { class: "metric", id: "probability" },
        el("h3", {}, "Referable-DR probability"),
        el("div", { class: "value not-graded" }, "Not graded"),
        el("p", { class: "explain" }, "The image cannot be graded, so the model's number is not a finding."));
    }
    if (outcome !== "refer_referable_dr" && outcome !== "no_referable_dr") {
      return el("div", { class: "metric", id: "probability" },
        el("h3", {}, "Referable-DR probability"),
        el("div", { class: "value estimate" }, words.probability),
        el("p", { class: "explain" },
          "The model is uncertain about this image, so this number may be far from the truth in either " +
          "direction. It is not a result: a trained grader grades the image."));
    }
    return el("div", { class: "metric", id: "probability" },
      el("h3", {}, "Referable-DR probability"),
      el("div", { class: "value" }, words.probability),
      gauge("prob", d.referable_dr_probability, d.decision_threshold, 1,
        `Probability ${pct(d.referable_dr_probability)}, decision threshold ${pct(d.decision_threshold)}`),
      el("p", { class: "explain" }, "The referral threshold is set low so that few referable eyes are missed, " +
        "so a referred photograph's probability is often far below 50 %."));
  }

  /** The batch table's probability cell: the same rules as the single view. */
  function probabilityCell(result) {
    const d = result.diagnosis;
    if (!result.quality.gradable || result.outcome === "retake_ungradable") {
      return el("span", { class: "not-graded" }, "Not graded");
    }
    if (result.outcome !== "refer_referable_dr" && result.outcome !== "no_referable_dr") {
      return el("span", { class: "estimate" }, `uncertain estimate ${pct(d.referable_dr_probability)}`,
        el("div", { class: "meta" }, "not a finding"));
    }
    return [pct(d.referable_dr_probability), el("div", { class: "meta" }, result.words.probability)];
  }

  function uncertaintyBlock(result) {
    const u = result.uncertainty, level = uncertaintyLevel(result);
    return el("div", { class: "metric", id: "uncertainty" },
      el("h3", {}, "Model uncertainty"),
      el("div", { class: `value level-${level}` }, `Uncertainty: ${result.words.uncertainty}`),
      gauge("mi", u.mutual_information, u.referral_threshold_mi, miScale(u.referral_threshold_mi),
        `Mutual information ${nat(u.mutual_information)} nat, calibrated threshold ${nat(u.referral_threshold_mi)} nat`),
      el("details", { class: "explain" },
        el("summary", {}, "Details"),
        `Mutual information ${nat(u.mutual_information)} nat against the calibrated threshold ` +
        `${nat(u.referral_threshold_mi)} nat. Above it a human grader reviews the image. The bar spans 0 to ` +
        "twice the threshold."));
  }

  function renderSingle(body, file, url) {
    const q = body.quality, m = body.model;
    const metrics = el("div", {},
      probabilityBlock(body.diagnosis, q, body.outcome, body.words),
      uncertaintyBlock(body),
      el("div", { class: "metric", id: "quality" },
        el("h3", {}, "Image quality"),
        el("div", { class: `quality ${q.gradable ? "ok" : "bad"}` }, qualityText(q, body.words)),
        qualityWhy(q),
        el("details", { class: "explain" }, el("summary", {}, "About the quality score"), qualityScoreNote(q))));
    const fhir = el("button", { type: "button", class: "secondary fhir-link", id: "fhir" }, "Download FHIR R4 report");
    fhir.addEventListener("click", () => downloadFhir(body, file.name));
    return el("article", { "aria-label": `Result for ${file.name}` },
      outcomeHeadline(body, "decision"),
      el("div", { class: "result-grid" },
        thumb(url, `Fundus photograph ${file.name}`, "thumb"),
        metrics),
      body.refer_to_expert
        ? el("p", { class: "meta" }, `The model defers this image to a human: ${deferralText(body)}.`) : null,
      el("p", { class: "meta" },
        `Scored by the model under “Model provenance” (version ${m.version}), ${m.mc_samples} posterior draws`,
        m.test_time_flip ? ", each image also scored mirrored" : "",
        m.passes ? ` (${m.passes} forward passes). ` : ". ",
        `Request ${body.request_id}. Timing: decode ${body.timing_ms.decode.toFixed(0)} ms, `,
        `queue ${body.timing_ms.queue.toFixed(0)} ms, inference ${body.timing_ms.inference.toFixed(0)} ms.`),
      el("p", { class: "meta disclaimer-line" }, DISCLAIMER),
      fhir);
  }

  function renderBatch(items) {
    const rows = items.map(({ file, url, result, problem }) => {
      const cells = [el("td", {}, thumb(url, "", "thumb"), el("div", { class: "meta" }, file.name))];
      if (problem) {
        cells.push(el("td", { class: "outcome-cell outcome-failed" }, "Not analysed: check the file"),
          el("td", { colspan: 3 }, problem.text, problem.detail ? ` (${problem.detail})` : ""));
      } else {
        const u = result.uncertainty, o = outcomeOf(result);
        cells.push(
          el("td", { class: `outcome-cell ${o.cls}`, "data-outcome": result.outcome }, o.headline),
          el("td", {}, probabilityCell(result)),
          el("td", { title: `Mutual information ${nat(u.mutual_information)} nat, threshold ${nat(u.referral_threshold_mi)} nat` },
            `Uncertainty: ${uncertaintyLevel(result)}`,
            gauge("mi", u.mutual_information, u.referral_threshold_mi, miScale(u.referral_threshold_mi),
              `Mutual information ${nat(u.mutual_information)}, threshold ${nat(u.referral_threshold_mi)}`, true),
            el("div", { class: "meta" }, `${nat(u.mutual_information)} nat`)),
          el("td", { title: qualityScoreNote(result.quality) }, qualityText(result.quality, result.words), qualityWhy(result.quality)));
      }
      return el("tr", {}, cells);
    });
    const counts = {};
    for (const key of [...Object.keys(OUTCOMES), "failed"]) counts[key] = 0;
    for (const i of items) counts[i.result ? i.result.outcome : "failed"] += 1;
    const summaryItems = Object.entries(OUTCOMES).map(([key, o]) =>
      el("li", { class: o.cls, "data-outcome": key }, `${o.headline}: ${counts[key]}`));
    summaryItems.push(el("li", { class: "outcome-failed", "data-outcome": "failed" }, `Not analysed (failed file): ${counts.failed}`));
    return el("div", {},
      el("p", { class: "summary", id: "batch-summary" },
        `${items.length} images: ${items.length - counts.failed} analysed, ${counts.failed} failed.`),
      el("ul", { class: "outcome-counts", id: "batch-counts" }, summaryItems),
      el("table", { class: "batch", id: "batch-table" },
        el("caption", {}, "Batch results (uncertainty bars share one scale: 0 to twice the calibrated threshold)"),
        el("thead", {}, el("tr", {},
          ["Image", "Screening outcome", "Referable-DR probability", "Uncertainty", "Image quality"]
            .map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows)));
  }

  /* ---------- requests ---------- */

  async function post(path, files, accept) {
    const form = new FormData();
    for (const f of files) form.append("image", f, f.name);
    return fetch(path, { method: "POST", body: form, headers: headers(accept ? { Accept: accept } : {}) });
  }

  /** FHIR for the result on screen: the service converts this JSON (same request id); the model is not run again. */
  async function downloadFhir(body, name) {
    clearError();
    try {
      const response = await fetch("/v1/fhir", {
        method: "POST", body: JSON.stringify(body),
        headers: headers({ "Content-Type": "application/json", Accept: "application/fhir+json" }),
      });
      if (!response.ok) { showError(await problemText(response)); return; }
      const blob = new Blob([JSON.stringify(await response.json(), null, 2)], { type: "application/fhir+json" });
      const link = el("a", { href: URL.createObjectURL(blob), download: `${name}.${body.request_id}.fhir.json` });
      document.body.append(link); link.click(); link.remove();
    } catch (err) {
      showError({ text: "Could not reach the service. Check the network connection and try again." });
    }
  }

  async function analyse(event) {
    event.preventDefault();
    if (!state.files.length) return;
    clearError();
    const results = $("results");
    results.setAttribute("aria-busy", "true");
    $("analyse").disabled = true;
    $("status").textContent = `Analysing ${state.files.length} image${state.files.length > 1 ? "s" : ""}…`;
    try {
      if (state.files.length === 1) {
        const response = await post("/v1/predict", state.files);
        if (!response.ok) {
          showError(await problemText(response));
          results.replaceChildren(el("p", { class: "hint" }, "No result: see the message above."));
          $("status").textContent = "Analysis failed.";
          return;
        }
        const body = await response.json();
        results.replaceChildren(renderSingle(body, state.files[0], state.urls[0]));
        $("status").textContent = `Analysis complete. ${outcomeOf(body).headline}.`;
      } else {
        const items = [];
        for (let start = 0; start < state.files.length; start += BATCH_LIMIT) {
          const files = state.files.slice(start, start + BATCH_LIMIT);
          const response = await post("/v1/predict/batch", files);
          if (!response.ok) {
            const info = await problemText(response);
            files.forEach((file, i) => items.push({ file, url: state.urls[start + i], problem: info }));
            continue;
          }
          const body = await response.json();
          for (const item of body.items) {
            const entry = { file: files[item.index], url: state.urls[start + item.index] };
            if (item.result) entry.result = Object.assign({ request_id: body.request_id }, item.result);
            else entry.problem = { text: PROBLEMS[(item.problem.type || "").split("/").pop()] || item.problem.title,
                                   detail: item.problem.detail };
            items.push(entry);
          }
        }
        results.replaceChildren(renderBatch(items));
        const failed = items.filter((i) => !i.result).length;
        $("status").textContent = `Batch complete: ${items.length} images, ${failed} failed.`;
      }
    } catch (err) {
      showError({ text: "Could not reach the service. Check the network connection and try again." });
      $("status").textContent = "Analysis failed.";
    } finally {
      results.setAttribute("aria-busy", "false");
      $("analyse").disabled = !state.files.length;
    }
  }

  /* ---------- file selection ---------- */

  function setFiles(fileList) {
    state.urls.forEach((u) => URL.revokeObjectURL(u));
    state.files = Array.from(fileList || []).filter((f) => f.size > 0);
    state.urls = state.files.map((f) => URL.createObjectURL(f));
    $("preview").replaceChildren(...state.files.map((f, i) =>
      el("li", {}, thumb(state.urls[i], `Preview of ${f.name}`, "preview-img"), el("span", { title: f.name }, f.name))));
    $("analyse").disabled = !state.files.length;
    $("clear").disabled = !state.files.length;
    $("analyse").textContent = state.files.length > 1 ? `Analyse ${state.files.length} images` : "Analyse";
    $("status").textContent = state.files.length
      ? `${state.files.length} image${state.files.length > 1 ? "s" : ""} selected.` : "";
  }

  function wireDropZone() {
    const zone = $("drop-zone"), input = $("file-input");
    // A native <button>: Enter and Space already activate it, so keyboard users need nothing extra.
    zone.addEventListener("click", () => input.click());
    input.addEventListener("change", () => setFiles(input.files));
    for (const type of ["dragenter", "dragover"]) {
      zone.addEventListener(type, (e) => { e.preventDefault(); zone.classList.add("dragover"); });
    }
    for (const type of ["dragleave", "drop"]) {
      zone.addEventListener(type, (e) => { e.preventDefault(); zone.classList.remove("dragover"); });
    }
    zone.addEventListener("drop", (e) => setFiles(e.dataTransfer && e.dataTransfer.files));
    $("clear").addEventListener("click", () => {
      input.value = ""; setFiles([]); clearError();
      $("results").replaceChildren(el("p", { class: "hint" }, "No image analysed yet."));
    });
  }

  /* ---------- model provenance ---------- */

  function bind(name, value, title) {
    document.querySelectorAll(`[data-bind="${name}"]`).forEach((node) => {
      node.textContent = value;
      if (title) node.setAttribute("title", title);
    });
  }

  /** The card behind the API key: fetched with this tab's key and opened as text in a new tab. */
  async function openModelCard(event) {
    event.preventDefault();
    const response = await fetch("/v1/model/card", { headers: headers({ Accept: "text/markdown" }) });
    if (!response.ok) { showError(await problemText(response)); return; }
    const url = URL.createObjectURL(new Blob([await response.text()], { type: "text/plain;charset=utf-8" }));
    window.open(url, "_blank", "noopener");
  }

  async function loadModel(attempt) {
    const status = $("model-status");
    try {
      const response = await fetch("/v1/model", { headers: headers() });
      if (!response.ok) {
        const info = await problemText(response);
        if (response.status === 401) markKeyRequired();
        status.textContent = info.text + (response.status === 401 ? "" : " Retrying…");
        if (response.status !== 401) setTimeout(() => loadModel(attempt + 1), Math.min(10000, 1000 * (attempt + 1)));
        return;
      }
      const body = await response.json();
      const m = body.model, c = body.calibration;
      state.model = body;
      bind("name", m.name); bind("version", m.version);
      bind("sha256_short", m.sha256.slice(0, 12), m.sha256);
      bind("mc_samples", `${m.mc_samples} fixed draws` + (m.test_time_flip ? ", on the image and its mirror" : "")
        + (m.passes ? ` (${m.passes} forward passes per image)` : ""));
      bind("training_summary", body.training_summary || m.training_data, m.training_data);
      bind("referral_threshold_mi", `${nat(c.referral_threshold_mi)} nat`);
      bind("decision_threshold", pct(c.decision_threshold));
      status.textContent = `Model ready (${body.runtime.backend} on ${body.runtime.device}).`;
    } catch (err) {
      status.textContent = "Could not reach the service. Retrying…";
      setTimeout(() => loadModel(attempt + 1), Math.min(10000, 1000 * (attempt + 1)));
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    wireDropZone();
    $("upload-form").addEventListener("submit", analyse);
    $("api-key").addEventListener("change", () => { if (!state.model) loadModel(0); });
    $("model-card-link").addEventListener("click", openModelCard);
    loadModel(0);
  });
})();
