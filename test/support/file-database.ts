/**
 * Loaded before every test file of a parallel run (`node --import ./test/support/file-database.ts
 * --test`, scripts/test.ts): when PAYONCE_TEST_TEMPLATE_URL names a migrated database, each test
 * file's process gets a database of its own, copied from it (CREATE DATABASE … TEMPLATE), and
 * DATABASE_URL points there before the file is loaded. Files then run side by side without sharing
 * the app's tables or the sandbox's ledger schema. scripts/test.ts drops the copies afterwards.
 *
 * Only in the test runner's child processes (NODE_TEST_CONTEXT): the parent that spawns them keeps
 * its environment, and a file run on its own (`node --test file`) uses DATABASE_URL as it is.
 */
import postgres from 'postgres';

const templateUrl = process.env.PAYONCE_TEST_TEMPLATE_URL;
if (templateUrl && process.env.NODE_TEST_CONTEXT) {
  const url = new URL(templateUrl);
  const template = decodeURIComponent(url.pathname.slice(1));
  const copy = `${template}_f${process.pid}`;
  url.pathname = '/postgres';
  const admin = postgres(url.toString(), { max: 1, onnotice: () => {}, connect_timeout: 10 });
  try {
    await admin.unsafe(`create database "${copy}" template "${template}"`);
  } finally {
    await admin.end({ timeout: 5 });
  }
  url.pathname = `/${encodeURIComponent(copy)}`;
  process.env.DATABASE_URL = url.toString();
}
