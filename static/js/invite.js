// The invitation page. A link is /invite/#<token>: the fragment never reaches a server (no
// request line, access log or Referer holds it). This takes it out of the address bar and
// the history at once, then posts it with the page's form (CSRF token and all); the server
// keeps the invitation in the session and redirects back here to show it.
function openInvite() {
  const token = window.location.hash.slice(1);
  if (!token) return;
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
  const form = document.getElementById("invite-open");
  if (!form) return;
  form.querySelector("input[name=token]").value = token;
  form.hidden = true;
  const opening = document.getElementById("invite-opening");
  if (opening) opening.hidden = false;
  form.submit();
}

openInvite();
