// The sign-in form: check the key with GET /v1/keys/me and keep it for this tab.

import { signIn } from "../api.js";
import { $ } from "../ui.js";

function nextPath() {
  const next = new URLSearchParams(location.search).get("next") || "/dashboard";
  // Only paths of the dashboard itself: never an open redirect.
  return /^\/dashboard(\/|$|\?)/.test(next) && !next.startsWith("//") ? next : "/dashboard";
}

export default function login() {
  const form = $("login-form");
  const input = $("api-key");
  const message = $("login-message");
  const reason = new URLSearchParams(location.search).get("reason");
  if (reason === "expired") message.textContent = "Your key was refused or revoked; sign in again.";
  input.focus();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    message.classList.remove("error");
    if (!key) {
      message.textContent = "Enter an API key.";
      message.classList.add("error");
      input.focus();
      return;
    }
    $("login-submit").disabled = true;
    message.textContent = "Checking the key…";
    try {
      const who = await signIn(key);
      message.textContent = `Signed in as ${who.name} (${who.role}).`;
      location.assign(nextPath());
    } catch (error) {
      message.textContent = error.status === 401 ? "This key is not valid (unknown or revoked)." : `Could not sign in: ${error.message}`;
      message.classList.add("error");
      $("login-submit").disabled = false;
      input.select();
    }
  });
}
