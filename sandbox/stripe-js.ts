/**
 * The sandbox's Stripe.js: the part of https://js.stripe.com/v3/ a card checkout page uses, so that a
 * page written against the real one runs unchanged against the sandbox (only the script URL differs).
 *
 *   GET /stripe-js/v3/                the script: window.Stripe(publishableKey) → elements() →
 *                                     create('card') → mount(el) / on('change') / unmount() / destroy(),
 *                                     confirmCardPayment(clientSecret, { payment_method: { card } }),
 *                                     retrievePaymentIntent(clientSecret)
 *
 * A card that asks for 3-D Secure leaves the PaymentIntent in requires_action with next_action
 * use_stripe_sdk: confirmCardPayment then opens the issuer's challenge (stripe-authentication.ts) in a
 * modal over the page, as Stripe.js does, and resolves once it is over with the PaymentIntent as it
 * is then — succeeded, or an error (payment_intent_authentication_failure when the buyer failed or
 * closed the challenge, the card's decline after a successful one).
 *   GET /stripe-js/v3/elements/card   the card Element's iframe: labelled inputs and the test cards
 *
 * As on Stripe, the card number never touches the merchant's page: it is typed into an iframe served
 * from the API's own origin, and `confirmCardPayment` asks that iframe (postMessage) to POST
 * /v1/payment_intents/{id}/confirm with the publishable key and the client secret — what Stripe.js
 * sends over the wire (`key`, `client_secret`, `payment_method_data[type]=card`,
 * `payment_method_data[card][number|exp_month|exp_year|cvc]`). Same origin as the API, so no CORS.
 *
 * Why not /v3/ as on js.stripe.com: the sandbox serves every gateway on one port, and WeChat Pay's API
 * owns every path under /v3/. The credentials hand out this URL as `jsUrl`.
 *
 * Plain script, no build step and no external assets: the sandbox runs offline.
 */
import type { SandboxRequest, SandboxResponse } from './gateway-module';

export const STRIPE_JS_PATH = '/stripe-js/v3/';
const CARD_FRAME_PATH = '/stripe-js/v3/elements/card';

/** The test cards the card iframe offers, each with what it does (https://docs.stripe.com/testing). */
const TEST_CARDS: readonly { number: string; outcome: string }[] = [
  { number: '4242424242424242', outcome: '支付成功 (succeeds)' },
  { number: '4000000000009995', outcome: '余额不足 (insufficient_funds)' },
  { number: '4000000000000002', outcome: '卡被拒绝 (card_declined)' },
  { number: '4000000000009987', outcome: '账户受限：挂失卡 (account restricted: lost_card)' },
  { number: '4000000000000069', outcome: '卡已过期 (expired_card)' },
  { number: '4000002760003184', outcome: '需要 3D Secure 验证 (authentication required)' },
  { number: '4000008260003178', outcome: '验证后余额不足 (authenticated, then insufficient_funds)' },
];

function script(origin: string): string {
  return `/* PayOnce PSP sandbox — Stripe.js v3 (the subset a card checkout uses). Not Stripe's code. */
(function () {
  'use strict';
  if (window.Stripe && window.Stripe.payonceSandbox) return;
  var ORIGIN = ${JSON.stringify(origin)};
  var FRAME_URL = ORIGIN + ${JSON.stringify(CARD_FRAME_PATH)};
  var TAG = 'payonce-stripe-sandbox';
  var counter = 0;
  var pending = {};
  var elementsById = {};

  function IntegrationError(message) {
    var error = new Error(message);
    error.name = 'IntegrationError';
    return error;
  }

  window.addEventListener('message', function (event) {
    if (event.origin !== ORIGIN) return;
    var data = event.data;
    if (!data || data.tag !== TAG) return;
    var element = elementsById[data.elementId];
    if (data.type === 'result') {
      var resolve = pending[data.requestId];
      delete pending[data.requestId];
      if (resolve) resolve(data.result);
    } else if (element && element._iframe && event.source === element._iframe.contentWindow) {
      if (data.type === 'ready') element._becomeReady();
      else if (data.type === 'change') element._emit('change', data.event);
      else if (data.type === 'focus' || data.type === 'blur') element._emit(data.type, { elementType: 'card' });
      else if (data.type === 'resize') element._iframe.style.height = Math.ceil(data.height) + 'px';
    }
  });

  function CardElement(stripe, elements, options) {
    counter += 1;
    this._id = 'card-' + counter + '-' + Math.random().toString(36).slice(2);
    this._stripe = stripe;
    this._elements = elements;
    this._options = options || {};
    this._handlers = {};
    this._iframe = null;
    this._wrapper = null;
    this._ready = false;
    this._queue = [];
    elementsById[this._id] = this;
  }
  CardElement.prototype.mount = function (target) {
    var node = typeof target === 'string' ? document.querySelector(target) : target;
    if (!node || !node.appendChild) {
      throw IntegrationError('The selector you specified (' + String(target) + ') applies to no DOM elements that are currently on the page.');
    }
    if (this._iframe) throw IntegrationError('This Element is already mounted. Use \`unmount()\` to unmount the Element before re-mounting.');
    var wrapper = document.createElement('div');
    wrapper.className = 'StripeElement';
    var iframe = document.createElement('iframe');
    iframe.name = '__privateStripeFrame' + counter;
    iframe.title = '安全的银行卡输入框 (Secure card payment input frame)';
    iframe.setAttribute('frameborder', '0');
    iframe.setAttribute('allowtransparency', 'true');
    iframe.setAttribute('scrolling', 'no');
    iframe.style.cssText = 'border:0;margin:0;padding:0;width:100%;min-width:100%;height:360px;display:block;overflow:hidden;';
    iframe.src = FRAME_URL + '?key=' + encodeURIComponent(this._stripe._key) + '#' + encodeURIComponent(this._id);
    wrapper.appendChild(iframe);
    node.appendChild(wrapper);
    this._wrapper = wrapper;
    this._iframe = iframe;
    this._ready = false;
  };
  CardElement.prototype.unmount = function () {
    if (this._wrapper && this._wrapper.parentNode) this._wrapper.parentNode.removeChild(this._wrapper);
    this._wrapper = null;
    this._iframe = null;
    this._ready = false;
    this._queue = [];
  };
  CardElement.prototype.destroy = function () {
    this.unmount();
    delete elementsById[this._id];
    if (this._elements._card === this) this._elements._card = null;
  };
  CardElement.prototype.on = function (event, handler) {
    (this._handlers[event] = this._handlers[event] || []).push(handler);
    if (event === 'ready' && this._ready) handler({ elementType: 'card' });
    return this;
  };
  CardElement.prototype.off = function (event, handler) {
    var list = this._handlers[event] || [];
    this._handlers[event] = handler ? list.filter(function (h) { return h !== handler; }) : [];
    return this;
  };
  CardElement.prototype.focus = function () { this._post({ type: 'focus' }); };
  CardElement.prototype.blur = function () { this._post({ type: 'blur' }); };
  CardElement.prototype.clear = function () { this._post({ type: 'clear' }); };
  CardElement.prototype.update = function () {};
  CardElement.prototype._emit = function (event, payload) {
    (this._handlers[event] || []).forEach(function (handler) { handler(payload); });
  };
  CardElement.prototype._becomeReady = function () {
    this._ready = true;
    var queue = this._queue;
    this._queue = [];
    for (var i = 0; i < queue.length; i += 1) this._post(queue[i]);
    this._emit('ready', { elementType: 'card' });
  };
  CardElement.prototype._post = function (message) {
    if (!this._iframe) return false;
    if (!this._ready) {
      this._queue.push(message);
      return true;
    }
    message.tag = TAG;
    message.elementId = this._id;
    this._iframe.contentWindow.postMessage(message, ORIGIN);
    return true;
  };

  function Elements(stripe, options) {
    this._stripe = stripe;
    this._options = options || {};
    this._card = null;
  }
  Elements.prototype.create = function (type, options) {
    if (type !== 'card') throw IntegrationError('The PayOnce sandbox’s Stripe.js offers the card Element only, not ' + String(type) + '.');
    if (this._card) throw IntegrationError('Can only create one Element of type card.');
    this._card = new CardElement(this._stripe, this, options);
    return this._card;
  };
  Elements.prototype.getElement = function (type) {
    return type === 'card' ? this._card : null;
  };

  var CLIENT_SECRET = /^(pi_[A-Za-z0-9]+)_secret_[A-Za-z0-9]+$/;

  function Stripe(publishableKey, options) {
    if (!(this instanceof Stripe)) return new Stripe(publishableKey, options);
    if (typeof publishableKey !== 'string' || !/^pk_(test|live)_/.test(publishableKey)) {
      throw IntegrationError('Invalid value for Stripe(): apiKey should be a publishable key (pk_test_… or pk_live_…). You specified: ' + String(publishableKey) + '.');
    }
    this._key = publishableKey;
    this._options = options || {};
  }
  Stripe.payonceSandbox = true;
  Stripe.prototype.elements = function (options) {
    return new Elements(this, options);
  };
  Stripe.prototype.confirmCardPayment = function (clientSecret, data) {
    var self = this;
    return new Promise(function (resolve, reject) {
      if (typeof clientSecret !== 'string' || !CLIENT_SECRET.test(clientSecret)) {
        reject(IntegrationError('Invalid value for confirmCardPayment intent secret: value should be a client secret of the form \${id}_secret_\${secret}. You specified: ' + String(clientSecret) + '.'));
        return;
      }
      var method = data && data.payment_method;
      var card = method && method.card;
      if (!(card instanceof CardElement) || card._stripe !== self || !card._iframe) {
        reject(IntegrationError('We could not retrieve data from the specified Element. Please make sure the Element you are attempting to use is still mounted.'));
        return;
      }
      counter += 1;
      var requestId = 'req-' + counter + '-' + Math.random().toString(36).slice(2);
      pending[requestId] = function (result) {
        var intent = result && result.paymentIntent;
        var next = intent && intent.status === 'requires_action' ? intent.next_action : null;
        if (next && next.type === 'use_stripe_sdk' && next.use_stripe_sdk && next.use_stripe_sdk.stripe_js) {
          challenge(self, clientSecret, next.use_stripe_sdk.stripe_js).then(resolve);
        } else {
          resolve(result);
        }
      };
      card._post({ type: 'confirm', requestId: requestId, clientSecret: clientSecret });
    });
  };

  // The issuer's 3-D Secure challenge in a modal over the page. Closing it abandons the challenge
  // (the frame answers it as a cancel); either way the result is the PaymentIntent as it is after.
  function challenge(stripe, clientSecret, url) {
    return new Promise(function (resolve) {
      var frameOrigin = new URL(url, ORIGIN).origin;
      var overlay = document.createElement('div');
      overlay.setAttribute('role', 'dialog');
      overlay.setAttribute('aria-modal', 'true');
      overlay.setAttribute('aria-label', '3D Secure 验证 (3D Secure authentication)');
      overlay.style.cssText = 'position:fixed;inset:0;z-index:2147483647;background:rgba(26,31,54,.55);display:flex;align-items:center;justify-content:center;';
      var box = document.createElement('div');
      box.style.cssText = 'position:relative;background:#fff;border-radius:8px;width:min(420px,94vw);height:min(520px,90vh);overflow:hidden;box-shadow:0 8px 32px rgba(0,0,0,.3);';
      var frame = document.createElement('iframe');
      frame.title = '3D Secure 验证 (3D Secure authentication)';
      frame.src = url;
      frame.style.cssText = 'border:0;width:100%;height:100%;display:block;';
      var close = document.createElement('button');
      close.type = 'button';
      close.textContent = '×';
      close.setAttribute('aria-label', '关闭验证窗口 (Close)');
      close.style.cssText = 'position:absolute;top:6px;right:8px;border:0;background:transparent;font-size:24px;line-height:1;cursor:pointer;color:#697386;';
      box.appendChild(frame);
      box.appendChild(close);
      overlay.appendChild(box);
      document.body.appendChild(overlay);
      var done = false;
      function finish() {
        if (done) return;
        done = true;
        window.removeEventListener('message', onMessage);
        if (overlay.parentNode) overlay.parentNode.removeChild(overlay);
        stripe.retrievePaymentIntent(clientSecret).then(function (read) {
          if (read.error) return resolve({ error: read.error });
          var intent = read.paymentIntent;
          if (intent.status === 'succeeded' || intent.status === 'processing' || intent.status === 'requires_capture') {
            return resolve({ paymentIntent: intent });
          }
          var error = {};
          var last = intent.last_payment_error || {
            type: 'invalid_request_error',
            code: 'payment_intent_authentication_failure',
            message: 'The provided PaymentMethod has failed authentication.',
          };
          Object.keys(last).forEach(function (k) { error[k] = last[k]; });
          error.payment_intent = intent;
          resolve({ error: error });
        }, function (err) {
          resolve({ error: { type: 'api_connection_error', message: '网络错误，请重试 (' + String(err && err.message) + ')' } });
        });
      }
      function onMessage(event) {
        if (event.origin !== frameOrigin || event.source !== frame.contentWindow) return;
        var data = event.data;
        if (data && data.tag === TAG && data.type === 'challenge-done') finish();
      }
      window.addEventListener('message', onMessage);
      close.addEventListener('click', function () {
        close.disabled = true;
        if (frame.contentWindow) frame.contentWindow.postMessage({ tag: TAG, type: 'abandon' }, frameOrigin);
        // A frame that never answers (its page failed to load) must not hold the buyer forever.
        setTimeout(finish, 5000);
      });
    });
  }
  Stripe.prototype.retrievePaymentIntent = function (clientSecret) {
    var match = typeof clientSecret === 'string' ? CLIENT_SECRET.exec(clientSecret) : null;
    if (!match) return Promise.reject(IntegrationError('Invalid value for retrievePaymentIntent: value should be a client secret of the form \${id}_secret_\${secret}.'));
    var url = ORIGIN + '/v1/payment_intents/' + match[1] + '?key=' + encodeURIComponent(this._key) + '&client_secret=' + encodeURIComponent(clientSecret);
    return fetch(url).then(function (response) {
      return response.json().then(function (body) {
        return response.ok ? { paymentIntent: body } : { error: body.error };
      });
    });
  };
  window.Stripe = Stripe;
})();
`;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch] ?? ch);
}

function groupDigits(number: string): string {
  return number.replace(/(\d{4})(?=\d)/g, '$1 ');
}

/**
 * The card Element's iframe. It talks only to its parent (the page that mounted it) and only about
 * the element named in its URL fragment; it confirms with the publishable key from its own URL.
 */
function cardFrame(): string {
  const cards = TEST_CARDS.map(
    (card) =>
      `<li><button type="button" data-number="${card.number}">${groupDigits(card.number)}</button><span>${escapeHtml(card.outcome)}</span></li>`,
  ).join('\n');
  return `<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>银行卡 (Card) — PayOnce 沙箱 Stripe</title>
<style>
  * { box-sizing: border-box; }
  body { margin: 0; padding: 4px; font: 16px/1.4 system-ui, -apple-system, "PingFang SC", sans-serif; color: #1a1a1a; background: transparent; }
  label { display: block; font-size: 14px; margin: 8px 0 4px; }
  input { width: 100%; font: inherit; padding: 10px; border: 1px solid #c4c4c4; border-radius: 6px; background: #fff; }
  input:focus { outline: 2px solid #635bff; border-color: #635bff; }
  input[aria-invalid="true"] { border-color: #df1b41; }
  .row { display: flex; gap: 12px; }
  .row > div { flex: 1; }
  #error { color: #df1b41; min-height: 1.4em; margin: 6px 0; font-size: 14px; }
  h2 { font-size: 14px; margin: 8px 0 4px; }
  ul { list-style: none; margin: 0; padding: 0; font-size: 13px; }
  li { display: flex; align-items: center; gap: 8px; margin: 4px 0; }
  li button { flex-shrink: 0; white-space: nowrap; font: 13px/1.2 ui-monospace, monospace; padding: 6px 8px; border: 1px solid #c4c4c4; border-radius: 6px; background: #f6f8fa; cursor: pointer; min-height: 32px; }
  .hint { font-size: 12px; color: #555; margin: 4px 0 0; }
</style>
</head>
<body>
<form id="card" novalidate autocomplete="on">
  <label for="number">卡号 (Card number)</label>
  <input id="number" name="cardnumber" inputmode="numeric" autocomplete="cc-number" placeholder="1234 1234 1234 1234" aria-describedby="error">
  <div class="row">
    <div>
      <label for="exp">有效期 (MM / YY)</label>
      <input id="exp" name="exp-date" inputmode="numeric" autocomplete="cc-exp" placeholder="MM / YY" aria-describedby="error">
    </div>
    <div>
      <label for="cvc">CVC</label>
      <input id="cvc" name="cvc" inputmode="numeric" autocomplete="cc-csc" placeholder="CVC" aria-describedby="error">
    </div>
  </div>
  <p id="error" role="alert"></p>
</form>
<section aria-labelledby="test-cards">
  <h2 id="test-cards">沙箱测试卡 (Sandbox test cards)</h2>
  <ul>
${cards}
  </ul>
  <p class="hint">任意未来的有效期与任意 3 位 CVC (any future expiry date, any 3-digit CVC)</p>
</section>
<script>
(function () {
  'use strict';
  var TAG = 'payonce-stripe-sandbox';
  var elementId = decodeURIComponent(location.hash.slice(1));
  var key = new URLSearchParams(location.search).get('key') || '';
  var number = document.getElementById('number');
  var exp = document.getElementById('exp');
  var cvc = document.getElementById('cvc');
  var errorBox = document.getElementById('error');
  var busy = false;

  function tell(message) {
    message.tag = TAG;
    message.elementId = elementId;
    // The parent's origin is unknown here (any merchant page); nothing secret is sent in these.
    window.parent.postMessage(message, '*');
  }
  function digits(text) { return text.replace(/\\D/g, ''); }
  function luhn(value) {
    var sum = 0;
    for (var i = 0; i < value.length; i += 1) {
      var d = Number(value[value.length - 1 - i]);
      if (i % 2 === 1) { d *= 2; if (d > 9) d -= 9; }
      sum += d;
    }
    return sum % 10 === 0;
  }
  function brand(value) {
    if (/^4/.test(value)) return 'visa';
    if (/^(5[1-5]|2[2-7])/.test(value)) return 'mastercard';
    if (/^3[47]/.test(value)) return 'amex';
    return value ? 'unknown' : 'unknown';
  }
  function readExpiry() {
    var d = digits(exp.value);
    if (d.length !== 4 && d.length !== 6) return null;
    var month = Number(d.slice(0, 2));
    var year = d.length === 4 ? 2000 + Number(d.slice(2)) : Number(d.slice(2));
    return { month: month, year: year };
  }
  /** Stripe.js's own checks before anything is sent, with its error codes. */
  function validate() {
    var n = digits(number.value);
    if (!n) return { code: 'incomplete_number', message: '卡号不完整 (Your card number is incomplete.)', field: number };
    if (n.length < 13 || n.length > 19) return { code: 'incomplete_number', message: '卡号不完整 (Your card number is incomplete.)', field: number };
    if (!luhn(n)) return { code: 'invalid_number', message: '卡号无效 (Your card number is invalid.)', field: number };
    var e = readExpiry();
    if (!e) return { code: 'incomplete_expiry', message: '有效期不完整 (Your card’s expiration date is incomplete.)', field: exp };
    var now = new Date();
    if (e.month < 1 || e.month > 12) return { code: 'invalid_expiry_month', message: '有效期月份无效 (Your card’s expiration month is invalid.)', field: exp };
    if (e.year < now.getFullYear() || (e.year === now.getFullYear() && e.month < now.getMonth() + 1)) {
      return { code: 'invalid_expiry_year_past', message: '有效期已过 (Your card’s expiration year is in the past.)', field: exp };
    }
    var c = digits(cvc.value);
    if (c.length < 3 || c.length > 4) return { code: 'incomplete_cvc', message: '安全码不完整 (Your card’s security code is incomplete.)', field: cvc };
    return null;
  }
  function showError(text, field) {
    errorBox.textContent = text || '';
    [number, exp, cvc].forEach(function (input) { input.setAttribute('aria-invalid', input === field ? 'true' : 'false'); });
  }
  function changed() {
    showError('');
    var problem = validate();
    var n = digits(number.value);
    tell({
      type: 'change',
      event: {
        elementType: 'card',
        empty: !n && !digits(exp.value) && !digits(cvc.value),
        complete: !problem,
        brand: brand(n),
        error: undefined,
        value: { postalCode: '' },
      },
    });
    resize();
  }
  function resize() { tell({ type: 'resize', height: document.documentElement.scrollHeight }); }

  [number, exp, cvc].forEach(function (input) {
    input.addEventListener('input', changed);
    input.addEventListener('focus', function () { tell({ type: 'focus' }); });
    input.addEventListener('blur', function () { tell({ type: 'blur' }); });
  });
  exp.addEventListener('input', function () {
    var d = digits(exp.value).slice(0, 4);
    exp.value = d.length > 2 ? d.slice(0, 2) + ' / ' + d.slice(2) : d;
  });
  Array.prototype.forEach.call(document.querySelectorAll('button[data-number]'), function (button) {
    button.addEventListener('click', function () {
      number.value = button.getAttribute('data-number').replace(/(\\d{4})(?=\\d)/g, '$1 ');
      if (!exp.value) exp.value = '12 / ' + String((new Date().getFullYear() + 3) % 100).padStart(2, '0');
      if (!cvc.value) cvc.value = '123';
      changed();
    });
  });
  document.getElementById('card').addEventListener('submit', function (event) { event.preventDefault(); });

  function confirm(requestId, clientSecret, reply) {
    var problem = validate();
    if (problem) {
      showError(problem.message, problem.field);
      reply({ error: { type: 'validation_error', code: problem.code, message: problem.message } });
      return;
    }
    if (busy) {
      reply({ error: { type: 'invalid_request_error', code: 'payment_intent_unexpected_state', message: '正在处理上一次付款 (A payment is already being confirmed.)' } });
      return;
    }
    busy = true;
    showError('');
    var id = clientSecret.split('_secret_')[0];
    var e = readExpiry();
    var body = new URLSearchParams();
    body.set('key', key);
    body.set('client_secret', clientSecret);
    body.set('expected_payment_method_type', 'card');
    body.set('use_stripe_sdk', 'true');
    body.set('payment_method_data[type]', 'card');
    body.set('payment_method_data[card][number]', digits(number.value));
    body.set('payment_method_data[card][exp_month]', String(e.month));
    body.set('payment_method_data[card][exp_year]', String(e.year));
    body.set('payment_method_data[card][cvc]', digits(cvc.value));
    fetch('/v1/payment_intents/' + encodeURIComponent(id) + '/confirm', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: body.toString(),
    })
      .then(function (response) {
        return response.json().then(function (json) {
          if (response.ok) return { paymentIntent: json };
          // As Stripe.js: a decline is the merchant's to show (result.error); the card field shows
          // only its own input errors.
          var error = json && json.error ? json.error : { type: 'api_error', message: 'HTTP ' + response.status };
          return { error: error };
        });
      })
      .catch(function (err) {
        return { error: { type: 'api_connection_error', message: '网络错误，请重试 (' + String(err && err.message) + ')' } };
      })
      .then(function (result) {
        busy = false;
        reply(result);
      });
  }

  window.addEventListener('message', function (event) {
    if (event.source !== window.parent) return;
    var data = event.data;
    if (!data || data.tag !== TAG || data.elementId !== elementId) return;
    if (data.type === 'confirm') {
      confirm(data.requestId, String(data.clientSecret || ''), function (result) {
        // The result goes back only to the page that asked, at its own origin.
        event.source.postMessage({ tag: TAG, elementId: elementId, type: 'result', requestId: data.requestId, result: result }, event.origin);
      });
    } else if (data.type === 'focus') number.focus();
    else if (data.type === 'blur') document.activeElement && document.activeElement.blur();
    else if (data.type === 'clear') { number.value = ''; exp.value = ''; cvc.value = ''; changed(); }
  });
  tell({ type: 'ready' });
  resize();
})();
</script>
</body>
</html>
`;
}

/** Answers the Stripe.js paths; undefined for every other path. */
export function handleStripeJs(request: SandboxRequest): SandboxResponse | undefined {
  const path = request.url.pathname;
  const isScript = path === STRIPE_JS_PATH || path === STRIPE_JS_PATH.slice(0, -1);
  if (!isScript && path !== CARD_FRAME_PATH) return undefined;
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    return { status: 405, headers: { 'content-type': 'text/plain; charset=utf-8', allow: 'GET' }, body: 'use GET' };
  }
  if (isScript) {
    return {
      status: 200,
      headers: { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-cache', 'access-control-allow-origin': '*' },
      body: script(new URL(request.baseUrl).origin),
    };
  }
  return {
    status: 200,
    headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-cache' },
    body: cardFrame(),
  };
}
