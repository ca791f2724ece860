/**
 * Reading the sandbox's 2C2P hosted payment page the way a browser without scripts would: its forms,
 * their fields, and submitting them. Shared by the sandbox contract tests and the adapter tests.
 */
import assert from 'node:assert/strict';

export interface HtmlForm {
  method: string;
  action: string;
  fields: Record<string, string>;
}

function unescapeHtml(text: string): string {
  return text
    .replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)))
    .replace(/&quot;/g, '"')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');
}

function attribute(tag: string, name: string): string | undefined {
  const match = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  return match ? unescapeHtml(match[1] ?? '') : undefined;
}

/** Every <form> of a page with its method, absolute action and the inputs that carry a value. */
export function formsOf(html: string, pageUrl: string): HtmlForm[] {
  return [...html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/g)].map((match) => {
    const tag = match[1] ?? '';
    const fields: Record<string, string> = {};
    for (const input of (match[2] ?? '').matchAll(/<input\b[^>]*>/g)) {
      const name = attribute(input[0], 'name');
      if (name) fields[name] = attribute(input[0], 'value') ?? '';
    }
    return {
      method: (attribute(tag, 'method') ?? 'get').toLowerCase(),
      action: new URL(attribute(tag, 'action') ?? '', pageUrl).toString(),
      fields,
    };
  });
}

/** The labels of a page, by the id of the input each one names (what a label locator finds). */
export function labelsOf(html: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const match of html.matchAll(/<label for="([^"]+)">([^<]*)<\/label>/g)) labels[match[1] ?? ''] = match[2] ?? '';
  return labels;
}

/** Submits a form as a browser does: POST, application/x-www-form-urlencoded, no redirects followed. */
export async function submitForm(
  form: HtmlForm,
  values: Record<string, string> = {},
): Promise<{ status: number; html: string; url: string }> {
  assert.equal(form.method, 'post');
  const res = await fetch(form.action, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ ...form.fields, ...values }).toString(),
    redirect: 'manual',
  });
  return { status: res.status, html: await res.text(), url: form.action };
}

/** Opens a hosted page and fills its card form (a future expiry and any CVV, as the page says). */
export async function payOnHostedPage(
  webPaymentUrl: string,
  cardNo: string,
  extra: Record<string, string> = {},
): Promise<{ status: number; html: string; url: string }> {
  const page = await fetch(webPaymentUrl);
  const html = await page.text();
  assert.equal(page.status, 200, html);
  const [form] = formsOf(html, webPaymentUrl);
  assert.ok(form, 'the hosted page has a card form');
  return submitForm(form, { cardNo, expiry: '12/30', securityCode: '123', name: 'Test Buyer', ...extra });
}

/** The paymentResponse the return page's form carries, decoded (2C2P: base64 of JSON). */
export function frontendReturnOf(html: string, pageUrl: string): { form: HtmlForm; response: Record<string, unknown> } {
  const form = formsOf(html, pageUrl).find((f) => 'paymentResponse' in f.fields);
  assert.ok(form, `the page carries a paymentResponse form: ${html}`);
  const response = JSON.parse(Buffer.from(form.fields.paymentResponse ?? '', 'base64').toString('utf8')) as Record<string, unknown>;
  return { form, response };
}
