// The API token lives in the gatectl_token cookie: fetch and EventSource send it
// on every same-origin request, and no script needs to keep it anywhere else.
// The server compares the cookie's raw value, so the token is stored as it is;
// a token with a character a cookie cannot hold is refused here, saying so.
const cookieSafe = /^[\x21\x23-\x2B\x2D-\x3A\x3C-\x5B\x5D-\x7E]+$/;

export function setToken(token) {
  if (!cookieSafe.test(token)) {
    throw new Error("the token has a character a cookie cannot carry (space, quote, comma, semicolon or backslash); send it as a header instead");
  }
  const secure = location.protocol === "https:" ? "; Secure" : "";
  document.cookie = "gatectl_token=" + token + "; Path=/; SameSite=Strict" + secure;
}

export function clearToken() {
  document.cookie = "gatectl_token=; Path=/; Max-Age=0; SameSite=Strict";
}
