/* Radial Screen exam page: photographs of the right and left eye of one visit go to POST /v1/exams; the
   patient's outcome (computed once server-side, models/outcome/decision.py) is the headline, the two eyes stand side
   by side with their own outcome and each photograph's result. A referable finding is never green; an
   ungradable photograph's probability is "not graded"; an uncertain one's is an uncertain estimate, not a
   finding. The patient line under the headline (the server's outcome_reason) names any retake still needed,
   and an eye to be retaken says why (its photographs' failed quality checks). Probability and uncertainty are
   the words the service sent (`words`, models/outcome/wording.py), the same as on the single-image page. Plain browser
   JavaScript, no build step. */
"use strict";

(function () {
  const EYES = ["right", "left"];
  const EYE_NAMES = { right: "Right eye (OD)", left: "Left eye (OS)" };
  // Patient-level headlines (the exam outcome), then the per-eye / per-photograph wording.
  const PATIENT = {
    refer_referable_dr: { cls: "outcome-refer", headline: "Refer the patient to an eye-care professional" },
    grader_review_uncertain: { cls: "outcome-review", headline: "Human grader review needed before a decision" },
    retake_ungradable: { cls: "outcome-retake", headline: "Retake: the patient cannot be screened yet" },
    no_referable_dr: { cls: "outcome-clear", headline: "No referable diabetic retinopathy in either eye" },
  };
  const EYE_OUTCOME = {
    refer_referable_dr: { cls: "outcome-refer", headline: "Referable DR" },
    grader_review_uncertain: { cls: "outcome-review", headline: "Grader review: the model is uncertain" },
    retake_ungradable: { cls: "outcome-retake", headline: "No gradable photograph" },
    no_referable_dr: { cls: "outcome-clear", headline: "No referable DR" },
  };
  const UNKNOWN = { cls: "outcome-review", headline: "Unknown outcome: human review needed" };

  const $ = (id) => document.getElementById(id);
  const state = { files: { right: [], left: [] }, urls: { right: [], left: [] }, training: "" };

  function node(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") n.className = v; else n.setAttribute(k, String(v));
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) n.append(c instanceof Node ? c : String(c));
    return n;
  }


  function photo(url, alt) {
    const img = node("img", { class: "thumb", src: url, alt });
    img.addEventListener("error", () => img.replaceWith(node("span", { class: "thumb no-preview" }, "No preview")));
    return img;
  }

  function requestHeaders() {
    const h = { Accept: "application/json" };
    const key = $("api-key").value.trim();
    if (key) h["X-API-Key"] = key;
    return h;
  }

  /** A photograph's probability as the single-image page words it: a finding only when the answer is a
      certain one; an uncertain photograph's number is an uncertain estimate, never set beside the threshold. */
  function probabilityLine(r) {
    if (!r.quality.gradable || r.outcome === "retake_ungradable") {
      return node("div", { class: "photo-probability" }, node("span", { class: "not-graded" }, "Not graded"));
    }
    if (r.outcome !== "refer_referable_dr" && r.outcome !== "no_referable_dr") {
      return node("div", { class: "photo-probability estimate" }, r.words.probability);
    }
    return node("div", { class: "photo-probability" }, `Referable-DR probability ${r.words.probability}`);
  }

  /** One photograph of an eye: its thumbnail, outcome, probability (or "not graded"), uncertainty, quality. */
  function photographRow(image, url) {
    const r = image.result, o = EYE_OUTCOME[r.outcome] || UNKNOWN;
    return node("li", { class: "exam-photo", "data-outcome": r.outcome },
      url ? photo(url, `${EYE_NAMES[image.eye]} photograph ${image.filename || ""}`) : node("span", { class: "thumb no-preview" }, "DICOM"),
      node("div", {},
        node("div", { class: `photo-outcome ${o.cls}` }, o.headline),
        probabilityLine(r),
        node("div", { class: "meta photo-uncertainty" }, `Uncertainty: ${r.words.uncertainty}; `,
          r.quality.gradable ? "gradable" : "not gradable"),
        r.words.retake_reason ? node("div", { class: "meta photo-retake" }, `Retake: ${r.words.retake_reason}`) : null,
        node("div", { class: "meta" }, image.filename || "")));
  }

  function eyeColumn(eye, body) {
    const entry = body.eyes[eye], o = EYE_OUTCOME[entry.outcome] || UNKNOWN;
    const missing = body.missing_eyes.includes(eye);
    const images = body.images.filter((im) => im.eye === eye);
    const why = [...new Set(images.map((im) => im.result.words.retake_reason).filter(Boolean))];
    const retake = entry.outcome === "retake_ungradable" && !missing && why.length
      ? node("p", { class: "retake-reason", id: `retake-${eye}` }, `Why a retake: ${why.join("; ")}`) : null;
    return node("section", { class: "eye-result", id: `eye-${eye}`, "aria-label": EYE_NAMES[eye] },
      node("h3", {}, EYE_NAMES[eye]),
      node("div", { class: `decision eye-decision ${missing ? "outcome-retake" : o.cls}`, "data-outcome": entry.outcome },
        node("span", { class: "outcome-headline" }, missing ? "No photograph of this eye" : o.headline),
        node("small", {}, entry.outcome_reason)),
      retake,
      node("ul", { class: "exam-photos" },
        images.map((im) => photographRow(im, (state.urls[eye] || [])[indexWithinEye(body, im)]))));
  }

  /** The photograph's position among its eye's parts, to find the thumbnail chosen for it. */
  function indexWithinEye(body, image) {
    return body.images.filter((im) => im.eye === image.eye && im.index < image.index).length;
  }

  /** The model card (behind the API key): fetched with this tab's key, opened as text in a new tab. */
  function cardLink() {
    const link = node("a", { href: "/v1/model/card", id: "model-card-link" }, "model card");
    link.addEventListener("click", async (event) => {
      event.preventDefault();
      const response = await fetch("/v1/model/card", { headers: Object.assign(requestHeaders(), { Accept: "text/markdown" }) });
      if (!response.ok) { showError(`The model card could not be loaded (the service answered ${response.status}).`); return; }
      const url = URL.createObjectURL(new Blob([await response.text()], { type: "text/plain;charset=utf-8" }));
      window.open(url, "_blank", "noopener");
    });
    return link;
  }

  function renderExam(body) {
    const p = PATIENT[body.outcome] || UNKNOWN, m = body.model;
    return node("article", { "aria-label": "Patient result" },
      node("div", { class: `decision patient-decision ${p.cls}`, id: "patient-decision", "data-outcome": body.outcome },
        node("span", { class: "outcome-headline" }, p.headline),
        node("small", {}, body.outcome_reason)),
      node("div", { class: "eyes-side-by-side" }, EYES.map((eye) => eyeColumn(eye, body))),
      node("p", { class: "meta provenance-line" }, `Model ${m.name} ${m.version} (sha256 ${m.sha256.slice(0, 12)})` +
        (state.training ? `, trained on ${state.training}` : "") + `, ${m.mc_samples} posterior draws (`,
        cardLink(),
        `). Request ${body.request_id}.` + (body.exam_id ? ` Exam ${body.exam_id}.` : "")),
      node("p", { class: "meta disclaimer-line" },
        "Decision support only, not a diagnosis. A clinician must review every result."));
  }

  function showError(text, detail) {
    const box = $("error");
    box.replaceChildren(node("p", {}, node("strong", {}, text)), detail ? node("p", { class: "error-detail" }, `Details: ${detail}`) : null);
    box.hidden = false;
  }

  async function analyse(event) {
    event.preventDefault();
    $("error").hidden = true;
    const form = new FormData();
    for (const eye of EYES) for (const f of state.files[eye]) form.append(eye, f, f.name);
    const examId = $("exam-id").value.trim();
    if (examId) form.append("exam_id", examId);
    $("analyse-exam").disabled = true;
    $("exam-results").setAttribute("aria-busy", "true");
    $("status").textContent = "Screening the patient…";
    try {
      const response = await fetch("/v1/exams", { method: "POST", body: form, headers: requestHeaders() });
      let body = null;
      try { body = await response.json(); } catch (_) { /* not JSON */ }
      if (!response.ok) {
        if (response.status === 401) $("settings").open = true;
        showError(response.status === 401 ? "The API key is missing or wrong. Enter it under “Connection settings”."
          : (body && body.title) || `The service answered ${response.status}.`, body && body.detail);
        $("exam-results").replaceChildren(node("p", { class: "hint" }, "No result: see the message above."));
        $("status").textContent = "Exam failed.";
        return;
      }
      $("exam-results").replaceChildren(renderExam(body));
      $("status").textContent = `Exam complete. ${(PATIENT[body.outcome] || UNKNOWN).headline}.`;
    } catch (err) {
      showError("Could not reach the service. Check the network connection and try again.");
      $("status").textContent = "Exam failed.";
    } finally {
      $("exam-results").setAttribute("aria-busy", "false");
      $("analyse-exam").disabled = false;
    }
  }

  function setFiles(eye, list) {
    state.urls[eye].forEach((u) => URL.revokeObjectURL(u));
    state.files[eye] = Array.from(list || []).filter((f) => f.size > 0);
    state.urls[eye] = state.files[eye].map((f) => URL.createObjectURL(f));
    $(`${eye}-preview`).replaceChildren(...state.files[eye].map((f, i) =>
      node("li", {}, photo(state.urls[eye][i], `Preview of ${f.name}`), node("span", { title: f.name }, f.name))));
    const any = EYES.some((e) => state.files[e].length);
    $("analyse-exam").disabled = !any;
    $("clear-exam").disabled = !any;
  }

  function wire(eye) {
    const zone = $(`${eye}-zone`), input = $(`${eye}-input`);
    zone.addEventListener("click", () => input.click());
    input.addEventListener("change", () => setFiles(eye, input.files));
    for (const type of ["dragenter", "dragover"]) zone.addEventListener(type, (e) => { e.preventDefault(); zone.classList.add("dragover"); });
    for (const type of ["dragleave", "drop"]) zone.addEventListener(type, (e) => { e.preventDefault(); zone.classList.remove("dragover"); });
    zone.addEventListener("drop", (e) => setFiles(eye, e.dataTransfer && e.dataTransfer.files));
  }

  async function loadTrainingData() {
    try {
      const response = await fetch("/v1/model", { headers: requestHeaders() });
      if (!response.ok) return;
      const body = await response.json();
      state.training = body.training_summary || "";
    } catch (_) { /* the result line names the model without its training summary */ }
  }

  document.addEventListener("DOMContentLoaded", () => {
    EYES.forEach(wire);
    $("exam-form").addEventListener("submit", analyse);
    $("clear-exam").addEventListener("click", () => {
      EYES.forEach((eye) => { $(`${eye}-input`).value = ""; setFiles(eye, []); });
      $("exam-results").replaceChildren(node("p", { class: "hint" }, "No exam analysed yet."));
    });
    $("api-key").addEventListener("change", loadTrainingData);
    loadTrainingData();
  });
})();
