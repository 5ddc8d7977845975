// The gateway's JSON API, called with the admin key from this tab's session storage (never a
// URL, a cookie or a log). Errors carry the gateway's own code, message and field.

const KEY = "foundry.console.admin_key";

export const session = {
  get key() {
    return sessionStorage.getItem(KEY) || "";
  },
  set(key) {
    sessionStorage.setItem(KEY, key);
  },
  clear() {
    sessionStorage.removeItem(KEY);
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    const where = error.field ? `, field ${error.field}` : "";
    super(`${error.message || "the gateway answered an error"} (HTTP ${status}${error.code ? `, ${error.code}` : ""}${where})`);
    this.status = status;
    this.code = error.code || "";
    this.field = error.field || "";
  }
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export async function api(path, { method = "GET", body, params, key } = {}) {
  const headers = { Accept: "application/json", Authorization: `Bearer ${key || session.key}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path + query(params), {
      method, headers, cache: "no-store", credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, { error: { message: "the gateway cannot be reached", code: "network" } });
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}
