// The login page: store the token in the gatectl_token cookie (which the event
// stream carries too, unlike a header) and open the console.
import { setToken } from "/ui/token.js";

const form = document.getElementById("login");
form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = document.getElementById("token").value.trim();
  const err = document.getElementById("login-error");
  if (!token) return;
  try {
    setToken(token);
  } catch (e) {
    err.hidden = false;
    err.textContent = e.message;
    return;
  }
  const r = await fetch("/gate/v1/status", { headers: { Accept: "application/json" } }).catch(() => null);
  if (r && r.ok) {
    location.replace("/ui" + location.hash);
    return;
  }
  err.hidden = false;
  err.textContent = r && r.status === 401 ? "The server refused this token." : "The server did not answer.";
});
