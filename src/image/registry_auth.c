/* warren registry client: authentication.
 *
 * Anonymous until the registry says otherwise. A 401 carries a challenge:
 *   Basic realm="..."                       -> send basic credentials from now on
 *   Bearer realm="..",service="..",scope=".." -> GET realm?service=..&scope=..
 *                                              (basic credentials, if any, on that
 *                                              request only), cache the token for
 *                                              the scope until it expires, retry
 * Once a bearer realm is known, later requests for a new scope fetch their
 * token before the request instead of paying a 401 round trip each time.
 * Token fetches are serialized (token_fetch_lock) so many threads missing
 * the same scope at once cost one fetch; the cache is re-checked under it.
 * Credentials travel only to the registry and its realm, and only over
 * https unless that host is loopback or the registry was opened insecure. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/registry_internal.h"

static char *b64(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	if (out)
		EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
	return out;
}

/* Decode standard base64 (padding allowed) to a NUL-terminated string. */
static char *unb64(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n % 4 != 0 || n > 65536)
		return NULL;
	unsigned char *out = malloc(n / 4 * 3 + 1);
	if (out == NULL)
		return NULL;
	int r = EVP_DecodeBlock(out, (const unsigned char *)s, (int)n);
	if (r < 0) {
		free(out);
		return NULL;
	}
	/* EVP_DecodeBlock counts padding as zero bytes */
	size_t len = (size_t)r;
	if (n >= 1 && s[n - 1] == '=')
		len--;
	if (n >= 2 && s[n - 2] == '=')
		len--;
	out[len] = 0;
	if (strlen((char *)out) != len) { /* embedded NUL */
		free(out);
		return NULL;
	}
	return (char *)out;
}

static bool header_safe(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* "https://index.docker.io/v1/" -> "index.docker.io"; "host:5000" -> same. */
static bool auth_key_matches(const char *key, const char *host)
{
	const char *k = key;
	if (strncmp(k, "https://", 8) == 0)
		k += 8;
	else if (strncmp(k, "http://", 7) == 0)
		k += 7;
	size_t n = strcspn(k, "/");
	if (strlen(host) == n && strncasecmp(k, host, n) == 0)
		return true;
	if (strcmp(host, "docker.io") == 0)
		return (n == 15 && strncmp(k, "index.docker.io", 15) == 0) ||
		       (n == 20 && strncmp(k, "registry-1.docker.io", 20) == 0);
	return false;
}

static int load_auth_file(struct wr_registry *reg, const char *path, wr_err *err)
{
	_cleanup_free_ char *text = NULL;
	if (wr_read_file_at(AT_FDCWD, path, &text, 1u << 20, err) < 0)
		return wr_err_wrap(err, "auth file %s", path);
	json_error_t je;
	json_t *root = json_loads(text, 0, &je);
	if (root == NULL)
		return wr_err_set(err, EINVAL, "auth file %s: line %d: %s", path, je.line, je.text);
	json_t *auths = json_object_get(root, "auths");
	const char *key;
	json_t *v;
	int r = 0;
	json_object_foreach(auths, key, v)
	{
		if (!auth_key_matches(key, reg->host))
			continue;
		const char *a = json_string_value(json_object_get(v, "auth"));
		const char *u = json_string_value(json_object_get(v, "username"));
		const char *p = json_string_value(json_object_get(v, "password"));
		const char *it = json_string_value(json_object_get(v, "identitytoken"));
		if (a && *a) {
			_cleanup_free_ char *dec = unb64(a);
			char *colon = dec ? strchr(dec, ':') : NULL;
			if (colon == NULL) {
				r = wr_err_set(
				    err, EINVAL,
				    "auth file %s: \"auth\" of %s is not base64 of user:password",
				    path, key);
				break;
			}
			*colon = 0;
			reg->username = strdup(dec);
			reg->password = strdup(colon + 1);
		} else if (u && p) {
			reg->username = strdup(u);
			reg->password = strdup(p);
		}
		if (it && *it)
			reg->identity_token = strdup(it);
		break;
	}
	json_decref(root);
	return r;
}

int reg_auth_init(struct wr_registry *reg, const struct wr_registry_opts *opts, wr_err *err)
{
	if (opts->username || opts->password) {
		if (!opts->username || !opts->password || !*opts->username)
			return wr_err_set(err, EINVAL, "auth: username and password go together");
		reg->username = strdup(opts->username);
		reg->password = strdup(opts->password);
		if (!reg->username || !reg->password)
			return wr_err_set(err, ENOMEM, "out of memory");
	} else if (opts->token) {
		if (!*opts->token || !header_safe(opts->token))
			return wr_err_set(err, EINVAL,
					  "auth: token must be non-empty printable text");
		if ((reg->static_token = strdup(opts->token)) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	} else if (opts->auth_file) {
		if (load_auth_file(reg, opts->auth_file, err) < 0)
			return -1;
	}
	if (reg->username) {
		_cleanup_free_ char *up = NULL;
		if (!header_safe(reg->username) || !header_safe(reg->password ? reg->password : ""))
			return wr_err_set(err, EINVAL, "auth: credentials must be printable text");
		if (strchr(reg->username, ':'))
			return wr_err_set(err, EINVAL, "auth: a username cannot contain ':'");
		if (asprintf(&up, "%s:%s", reg->username, reg->password) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		_cleanup_free_ char *enc = b64(up);
		if (enc == NULL || asprintf(&reg->basic_header, "Authorization: Basic %s", enc) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

static void token_free(struct reg_token *t)
{
	free(t->scope);
	if (t->token)
		memset(t->token, 0, strlen(t->token));
	free(t->token);
	free(t);
}

static void wipe_free(char *s)
{
	if (s)
		memset(s, 0, strlen(s));
	free(s);
}

void reg_auth_free(struct wr_registry *reg)
{
	while (reg->tokens) {
		struct reg_token *t = reg->tokens;
		reg->tokens = t->next;
		token_free(t);
	}
	free(reg->username);
	wipe_free(reg->password);
	wipe_free(reg->identity_token);
	wipe_free(reg->static_token);
	wipe_free(reg->basic_header);
	free(reg->realm);
	free(reg->service);
}

/* Does a token granted for scope `have` serve a request needing `want`?
 * Equal scopes do; so does "repository:x:pull,push" for "repository:x:pull"
 * (a push HEADs blobs with pull scope: one token serves the whole push). */
static bool scope_covers(const char *have, const char *want)
{
	if (strcmp(have, want) == 0)
		return true;
	if (strchr(have, ' ') || strchr(want, ' '))
		return false;
	const char *hc = strrchr(have, ':'), *wc = strrchr(want, ':');
	if (!hc || !wc || hc - have != wc - want || strncmp(have, want, (size_t)(hc - have)) != 0)
		return false;
	/* every action wanted is among those granted */
	for (const char *a = wc + 1; *a;) {
		size_t n = strcspn(a, ",");
		bool found = false;
		for (const char *b = hc + 1; *b && !found;) {
			size_t m = strcspn(b, ",");
			found = m == n && strncmp(a, b, n) == 0;
			b += m + (b[m] == ',');
		}
		if (!found)
			return false;
		a += n + (a[n] == ',');
	}
	return true;
}

/* Under auth_lock: a live token serving scope key, or NULL. */
static struct reg_token *token_find(struct wr_registry *reg, const char *key)
{
	uint64_t now = reg_now_ns();
	for (struct reg_token *t = reg->tokens; t; t = t->next)
		if (strcmp(t->scope, key) == 0 && t->expiry_ns > now)
			return t;
	for (struct reg_token *t = reg->tokens; t; t = t->next)
		if (t->expiry_ns > now && scope_covers(t->scope, key))
			return t;
	return NULL;
}

static void token_drop(struct wr_registry *reg, const char *key)
{
	uint64_t now = reg_now_ns();
	struct reg_token **pp = &reg->tokens;
	while (*pp) {
		struct reg_token *t = *pp;
		if (strcmp(t->scope, key) == 0 || t->expiry_ns <= now) {
			*pp = t->next;
			token_free(t);
		} else {
			pp = &t->next;
		}
	}
}

struct membuf {
	char *p;
	size_t len;
	bool overflow;
};

static size_t mem_write(char *data, size_t size, size_t n, void *userp)
{
	struct membuf *m = userp;
	size_t len = size * n;
	if (m->len + len > REG_TOKEN_MAX) {
		m->overflow = true;
		return 0;
	}
	char *p = realloc(m->p, m->len + len + 1);
	if (p == NULL)
		return 0;
	memcpy(p + m->len, data, len);
	m->p = p;
	m->len += len;
	m->p[m->len] = 0;
	return len;
}

/* Add "scope=<s>" for each space-separated scope in list (skipping dups of
 * what is already there). */
static char *add_scopes(char *url, const char *list)
{
	if (list == NULL)
		return url;
	_cleanup_free_ char *copy = strdup(list);
	if (copy == NULL) {
		free(url);
		return NULL;
	}
	char *save = NULL;
	for (char *s = strtok_r(copy, " ", &save); s && url; s = strtok_r(NULL, " ", &save)) {
		char *next = reg_url_add_query(url, "scope", s);
		free(url);
		url = next;
	}
	return url;
}

static bool realm_allowed(struct wr_registry *reg, const char *realm)
{
	if (strncmp(realm, "https://", 8) == 0)
		return true;
	if (strncmp(realm, "http://", 7) != 0)
		return false;
	char host[300];
	const char *h = realm + 7;
	size_t n = strcspn(h, "/?#");
	if (n >= sizeof(host))
		return false;
	memcpy(host, h, n);
	host[n] = 0;
	return reg->insecure || reg_host_is_loopback(host);
}

/* Fetch a token for key (our scope list) plus extra (the challenge's scope).
 * Caller holds token_fetch_lock. Inserts it in the cache. */
static int fetch_token(struct wr_registry *reg, const char *key, const char *extra, wr_err *err)
{
	pthread_mutex_lock(&reg->auth_lock);
	char *realm = reg->realm ? strdup(reg->realm) : NULL;
	char *service = reg->service ? strdup(reg->service) : NULL;
	pthread_mutex_unlock(&reg->auth_lock);
	_cleanup_free_ char *realm_c = realm, *service_c = service;
	if (realm == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	_cleanup_free_ char *url = strdup(realm), *form = NULL;
	if (url && service && !reg->identity_token) {
		char *u = reg_url_add_query(url, "service", service);
		free(url);
		url = u;
	}
	if (!reg->identity_token) {
		url = add_scopes(url, key);
		if (extra && *extra && strcmp(extra, key) != 0)
			url = add_scopes(url, extra);
	} else {
		/* OAuth2 refresh-token grant (docker's identity tokens) */
		CURL *e = curl_easy_init();
		char *it = e ? curl_easy_escape(e, reg->identity_token, 0) : NULL;
		char *sv = e ? curl_easy_escape(e, service ? service : "", 0) : NULL;
		char *sc = e ? curl_easy_escape(e, *key ? key : (extra ? extra : ""), 0) : NULL;
		if (it && sv && sc &&
		    asprintf(&form,
			     "grant_type=refresh_token&client_id=warren&refresh_token=%s&service=%s"
			     "&scope=%s",
			     it, sv, sc) < 0)
			form = NULL;
		curl_free(it);
		curl_free(sv);
		curl_free(sc);
		curl_easy_cleanup(e);
		if (form == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	if (url == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");

	CURL *h = reg_handle_get(reg);
	if (h == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct membuf m = {0};
	struct curl_slist *hl = NULL;
	if (reg->basic_header && !reg->identity_token)
		hl = curl_slist_append(hl, reg->basic_header);
	char ebuf[CURL_ERROR_SIZE] = "";
	reg_handle_setup(reg, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mem_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &m);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)reg->range_timeout_ms);
	if (form)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, form);
	CURLcode cc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	atomic_fetch_add(&reg->n_requests, 1);
	curl_slist_free_all(hl);
	reg_handle_put(reg, h);
	_cleanup_free_ char *body = m.p;
	char shown[256];
	snprintf(shown, sizeof(shown), "%.*s", (int)strcspn(realm, "?"), realm);
	if (cc != CURLE_OK)
		return wr_err_set(err, cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO,
				  "token from %s: %s", shown,
				  ebuf[0] ? ebuf : curl_easy_strerror(cc));
	if ((status == 401 || status == 403) && reg->basic_header == NULL && !reg->identity_token)
		return wr_err_set(err, EACCES,
				  "registry %s requires credentials: its token service %s refused "
				  "an anonymous request (HTTP %ld)",
				  reg->host, shown, status);
	if (status == 401 || status == 403)
		return wr_err_set(err, EACCES, "token from %s: credentials rejected (HTTP %ld)",
				  shown, status);
	if (status != 200)
		return wr_err_set(err, EIO, "token from %s: HTTP %ld", shown, status);
	json_t *j = body ? json_loadb(body, m.len, 0, NULL) : NULL;
	const char *tok = json_string_value(json_object_get(j, "token"));
	if (tok == NULL || !*tok)
		tok = json_string_value(json_object_get(j, "access_token"));
	json_int_t ttl = json_integer_value(json_object_get(j, "expires_in"));
	if (tok == NULL || !*tok || !header_safe(tok) || strlen(tok) > 65536) {
		json_decref(j);
		return wr_err_set(err, EBADMSG, "token from %s: no usable token in the answer",
				  shown);
	}
	if (ttl <= 0)
		ttl = 60; /* the token spec's default */
	if (ttl > 86400)
		ttl = 86400;
	struct reg_token *t = calloc(1, sizeof(*t));
	if (t) {
		t->scope = strdup(key);
		t->token = strdup(tok);
	}
	json_decref(j);
	if (t == NULL || t->scope == NULL || t->token == NULL) {
		if (t)
			token_free(t);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	/* renew a little before the registry would refuse it */
	uint64_t margin = ttl > 20 ? 10 : (uint64_t)ttl / 2;
	t->expiry_ns = reg_now_ns() + ((uint64_t)ttl - margin) * 1000000000ull;
	pthread_mutex_lock(&reg->auth_lock);
	token_drop(reg, key);
	t->next = reg->tokens;
	reg->tokens = t;
	pthread_mutex_unlock(&reg->auth_lock);
	return 0;
}

/* Copy of the cached token's header for key, or NULL. */
static char *cached_header(struct wr_registry *reg, const char *key)
{
	char *out = NULL;
	pthread_mutex_lock(&reg->auth_lock);
	struct reg_token *t = token_find(reg, key);
	if (t && asprintf(&out, "Authorization: Bearer %s", t->token) < 0)
		out = NULL;
	pthread_mutex_unlock(&reg->auth_lock);
	return out;
}

int reg_auth_header(struct wr_registry *reg, const char *scope, char **out, wr_err *err)
{
	*out = NULL;
	const char *key = scope ? scope : "";
	if (reg->static_token) {
		if (asprintf(out, "Authorization: Bearer %s", reg->static_token) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		return 0;
	}
	pthread_mutex_lock(&reg->auth_lock);
	bool basic = reg->use_basic, bearer = reg->realm != NULL;
	pthread_mutex_unlock(&reg->auth_lock);
	if (basic) {
		if ((*out = strdup(reg->basic_header)) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		return 0;
	}
	if (!bearer)
		return 0;
	if ((*out = cached_header(reg, key)) != NULL)
		return 0;
	pthread_mutex_lock(&reg->token_fetch_lock);
	*out = cached_header(reg, key);
	int r = 0;
	if (*out == NULL) {
		r = fetch_token(reg, key, NULL, err);
		if (r == 0)
			*out = cached_header(reg, key);
	}
	pthread_mutex_unlock(&reg->token_fetch_lock);
	return r;
}

struct challenge {
	char scheme[16];
	char *realm, *service, *scope, *error;
};

static void challenge_free(struct challenge *ch)
{
	free(ch->realm);
	free(ch->service);
	free(ch->scope);
	free(ch->error);
}

/* `Bearer realm="https://a/token",service="reg",scope="repository:x:pull,push"` */
static int parse_challenge(const char *s, struct challenge *ch)
{
	memset(ch, 0, sizeof(*ch));
	while (*s == ' ')
		s++;
	size_t n = strcspn(s, " ");
	if (n == 0 || n >= sizeof(ch->scheme))
		return -EINVAL;
	memcpy(ch->scheme, s, n);
	s += n;
	while (*s) {
		while (*s == ' ' || *s == ',')
			s++;
		if (*s == 0)
			break;
		const char *k = s;
		while (isalnum((unsigned char)*s) || *s == '_' || *s == '-')
			s++;
		size_t kl = (size_t)(s - k);
		if (*s != '=')
			return -EINVAL;
		s++;
		char val[2048];
		size_t vl = 0;
		if (*s == '"') {
			for (s++; *s && *s != '"'; s++) {
				if (*s == '\\' && s[1])
					s++;
				if (vl + 1 >= sizeof(val))
					return -EINVAL;
				val[vl++] = *s;
			}
			if (*s != '"')
				return -EINVAL;
			s++;
		} else {
			while (*s && *s != ',' && *s != ' ') {
				if (vl + 1 >= sizeof(val))
					return -EINVAL;
				val[vl++] = *s++;
			}
		}
		val[vl] = 0;
		char **slot = NULL;
		if (kl == 5 && strncasecmp(k, "realm", 5) == 0)
			slot = &ch->realm;
		else if (kl == 7 && strncasecmp(k, "service", 7) == 0)
			slot = &ch->service;
		else if (kl == 5 && strncasecmp(k, "scope", 5) == 0)
			slot = &ch->scope;
		else if (kl == 5 && strncasecmp(k, "error", 5) == 0)
			slot = &ch->error;
		if (slot) {
			free(*slot);
			if ((*slot = strdup(val)) == NULL)
				return -ENOMEM;
		}
	}
	return 0;
}

int reg_auth_challenge(struct wr_registry *reg, const char *scope, const char *www_auth,
		       bool had_auth, wr_err *err)
{
	const char *key = scope ? scope : "";
	if (reg->static_token)
		return wr_err_set(err, EACCES, "registry %s rejected the bearer token", reg->host);
	if (www_auth == NULL)
		return wr_err_set(err, EACCES, "registry %s answered 401 without a challenge",
				  reg->host);
	struct challenge ch;
	if (parse_challenge(www_auth, &ch) < 0) {
		challenge_free(&ch);
		return wr_err_set(err, EACCES, "registry %s: unreadable WWW-Authenticate challenge",
				  reg->host);
	}
	int r = 0;
	if (strcasecmp(ch.scheme, "Basic") == 0) {
		if (reg->basic_header == NULL)
			r = wr_err_set(err, EACCES,
				       "registry %s requires credentials (basic auth); none given",
				       reg->host);
		else if (had_auth)
			r = wr_err_set(err, EACCES, "registry %s rejected the credentials for %s",
				       reg->host, reg->username);
		else {
			pthread_mutex_lock(&reg->auth_lock);
			reg->use_basic = true;
			pthread_mutex_unlock(&reg->auth_lock);
		}
	} else if (strcasecmp(ch.scheme, "Bearer") == 0) {
		if (ch.realm == NULL || !realm_allowed(reg, ch.realm)) {
			r = wr_err_set(
			    err, EACCES,
			    "registry %s: token realm '%s' must be an https URL (http only "
			    "on loopback or with insecure)",
			    reg->host, ch.realm ? ch.realm : "");
		} else {
			pthread_mutex_lock(&reg->auth_lock);
			free(reg->realm);
			free(reg->service);
			reg->realm = strdup(ch.realm);
			reg->service = ch.service ? strdup(ch.service) : NULL;
			if (had_auth)
				token_drop(reg, key); /* it was rejected */
			pthread_mutex_unlock(&reg->auth_lock);
			pthread_mutex_lock(&reg->token_fetch_lock);
			/* Threads that met the challenge together fetch one token:
			 * whoever comes second finds it cached. */
			_cleanup_free_ char *have = had_auth ? NULL : cached_header(reg, key);
			if (have == NULL)
				r = fetch_token(reg, key, ch.scope, err);
			pthread_mutex_unlock(&reg->token_fetch_lock);
			if (r < 0)
				wr_err_wrap(err, "registry %s", reg->host);
		}
	} else {
		r = wr_err_set(err, EACCES, "registry %s: unsupported auth scheme '%s'", reg->host,
			       ch.scheme);
	}
	challenge_free(&ch);
	return r;
}
