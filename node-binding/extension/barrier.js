// Test barriers of the Pi extension (test-only, like PIW_PI_FAULT).
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A test's barrier (test-only, like PIW_PI_FAULT): with PIW_PI_BARRIER_DIR set, while
 * `<dir>/<point>.hold` exists the session waits at `point`. `<point>.reached` says it got there,
 * `<point>.passed` that it goes on (written just before the code after the point runs, which
 * runs on without yielding to anything but what it awaits).
 */
export async function barrier(point) {
  const dir = process.env.PIW_PI_BARRIER_DIR;
  if (!dir || !existsSync(join(dir, `${point}.hold`))) return;
  writeFileSync(join(dir, `${point}.reached`), '');
  while (existsSync(join(dir, `${point}.hold`))) await new Promise((r) => setTimeout(r, 20));
  writeFileSync(join(dir, `${point}.passed`), '');
}
