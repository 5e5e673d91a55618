// fragscope view: formatting and DOM helpers. Every text from the data goes through textContent
// (el() below): phases, roles, call sites and headlines come from users' logs.
"use strict";

const FS = window.FS || (window.FS = {});

FS.bytes = function (n) {
  if (n === null || n === undefined || isNaN(n)) return "–";
  const units = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  for (const [unit, size] of units) {
    if (Math.abs(n) >= size) return (n / size).toFixed(2) + " " + unit;
  }
  return Math.round(n) + " B";
};

FS.count = function (n) {
  return Math.round(n).toLocaleString("en-US");
};

FS.duration = function (ns) {
  if (ns === undefined || ns === null) return "";
  if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
  if (ns >= 1e6) return (ns / 1e6).toFixed(2) + " ms";
  return (ns / 1e3).toFixed(0) + " us";
};

// Text from the data, shown as is but for the characters that would change how the rest reads:
// control characters and the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069,
// which could make a call site read backwards) become visible escapes.
FS.safe = function (text) {
  return String(text).replace(/[\u0000-\u001f\u007f\u202a-\u202e\u2066-\u2069]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
};

// el("li", {class: "x", title: "..."}, "text", child, ...): an element with text children.
FS.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, FS.safe(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "string" || typeof child === "number"
      ? document.createTextNode(FS.safe(child)) : child);
  }
  return node;
};

FS.clear = function (node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
};

FS.status = function (text) {
  document.getElementById("status").textContent = FS.safe(text || "");
};

// Loads data/NAME as a script (a page opened from file:// may not fetch its neighbours).
FS.loadScript = function (src, onError) {
  const script = document.createElement("script");
  script.src = src;
  script.onerror = function () {
    script.remove();
    if (onError) onError(src);
  };
  script.onload = function () { script.remove(); };
  document.body.appendChild(script);
};

// A tile's base64 payload -> Float64Array of its buckets' columns.
FS.decodeTile = function (base64) {
  const raw = atob(base64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return new Float64Array(bytes.buffer, 0, Math.floor(bytes.length / 8));
};
