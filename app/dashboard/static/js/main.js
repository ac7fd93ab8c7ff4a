// Entry point of every dashboard page: check the session, then run the page's module.

import { principal, signOut, storedKey } from "./api.js";
import { $, showError } from "./ui.js";

const page = document.body.dataset.page;
// A token of this page load: a test (or a person) can tell a live update from a reload.
window.__dashboard = { page, loadedAt: Date.now(), token: Math.random().toString(36).slice(2) };

function showSession() {
  const who = principal();
  const box = $("session");
  if (!who || !box) return;
  $("session-name").textContent = who.name;
  $("session-role").textContent = who.role;
  box.hidden = false;
  $("sign-out").addEventListener("click", () => signOut());
}

async function start() {
  if (page !== "login") {
    if (!storedKey()) {
      signOut();
      return;
    }
    showSession();
  }
  try {
    const module = await import(`./pages/${page}.js`);
    await module.default(document.body.dataset);
  } catch (error) {
    showError(error);
  } finally {
    document.body.dataset.ready = "true";
  }
}

start();
