// A live `hivemem serve` for the tests: an embedded store in a temporary folder (the hashing
// embedder, so no model loads), API keys made with `hivemem apikey create`, on a free port.
// HIVEMEM_CLI names the CLI (default: `hivemem` on the PATH, e.g. the activated venv's).

import { spawn, execFileSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, openSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const CLI = process.env.HIVEMEM_CLI ?? "hivemem";

function env(): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("HIVEMEM_")) out[k] = v;
  return { ...out, HIVEMEM_EMBEDDING__PROVIDER: "hashing", HIVEMEM_EMBEDDING__DIM: "64" };
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => typeof address === "object" && address
        ? resolve(address.port) : reject(new Error("no port")));
    });
  });
}

export class Served {
  readonly keys: Record<string, string> = {};
  private process: ChildProcess | null = null;
  url = "";

  private constructor(readonly folder: string) {}

  /** Keys: name -> [namespace, agent or null]. */
  static async start(keys: Record<string, [string, string | null]>): Promise<Served> {
    const served = new Served(mkdtempSync(join(tmpdir(), "hivemem-ts-")));
    const store = join(served.folder, "memory");
    for (const [name, [namespace, agent]] of Object.entries(keys)) {
      const args = ["--local", store, "apikey", "create", namespace, "--name", name, "--json"];
      if (agent) args.push("--agent", agent);
      const made = JSON.parse(execFileSync(CLI, args, { env: env(), timeout: 120_000 }).toString());
      served.keys[name] = made.key;
    }
    const port = await freePort();
    served.url = `http://127.0.0.1:${port}`;
    const log = openSync(join(served.folder, "serve.log"), "a");
    served.process = spawn(CLI, ["--local", store, "serve", "--port", String(port)],
                           { env: env(), stdio: ["ignore", log, log] });
    const deadline = Date.now() + 120_000;
    for (;;) {
      try {
        if ((await fetch(`${served.url}/readyz`)).ok) return served;
      } catch { /* not listening yet */ }
      if (served.process.exitCode !== null || Date.now() > deadline) {
        await served.stop();
        throw new Error(`hivemem serve did not get ready (see ${served.folder}/serve.log)`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async stop(): Promise<void> {
    const child = this.process;
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    rmSync(this.folder, { recursive: true, force: true });
  }
}
