// The module worker the page's engine runs in (createPoot's `worker` option).
import { serveEngine } from "poot";

serveEngine();
