
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'metralectl' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'metralectl'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'metralectl' {
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the recipes: built-in ones and yours')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Show everything a recipe pins, and whether it fits this machine')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively')
            [CompletionResult]::new('top', 'top', [CompletionResultType]::ParameterValue, 'Live dashboard of a running engine: throughput, batch, KV cache, every request')
            [CompletionResult]::new('chat', 'chat', [CompletionResultType]::ParameterValue, 'Talk to a model in the terminal: a running engine, or a recipe started for it')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token')
            [CompletionResult]::new('ps', 'ps', [CompletionResultType]::ParameterValue, 'List the running engines')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'Stop engines (a container is removed)')
            [CompletionResult]::new('logs', 'logs', [CompletionResultType]::ParameterValue, 'Show an engine''s log')
            [CompletionResult]::new('pull', 'pull', [CompletionResultType]::ParameterValue, 'Fetch a recipe''s engine image and Hub checkpoint ahead of time')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Write shell completions to stdout')
            [CompletionResult]::new('bench', 'bench', [CompletionResultType]::ParameterValue, 'Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md)')
            [CompletionResult]::new('sign', 'sign', [CompletionResultType]::ParameterValue, 'Sign a file (a release''s SHA256SUMS, a benchmark record): writes FILE.minisig')
            [CompletionResult]::new('verify', 'verify', [CompletionResultType]::ParameterValue, 'Check a signed file (a release''s SHA256SUMS, a benchmark record) against a trusted key')
            [CompletionResult]::new('self', 'self', [CompletionResultType]::ParameterValue, 'Update or remove this installation of metralectl and met')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;list' {
            [CompletionResult]::new('--vendor', '--vendor', [CompletionResultType]::ParameterName, 'Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA)')
            [CompletionResult]::new('--family', '--family', [CompletionResultType]::ParameterName, 'Only recipes of this model family (e.g. qwen3, qwen3.6)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (see docs/recipes.md for its fields)')
            [CompletionResult]::new('--names', '--names', [CompletionResultType]::ParameterName, 'Print only the names, one a line (shell completion reads them)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;show' {
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (see docs/recipes.md for its fields)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;run' {
            [CompletionResult]::new('--port', '--port', [CompletionResultType]::ParameterName, 'Serve on this port instead of the recipe''s')
            [CompletionResult]::new('--host', '--host', [CompletionResultType]::ParameterName, 'Address to serve on (in a container: the host side of the port binding). The default keeps the engine to this machine; 0.0.0.0 opens it to every network it is on')
            [CompletionResult]::new('--gpus', '--gpus', [CompletionResultType]::ParameterName, 'GPUs to give the engine: `all`, or indices like `0,1`')
            [CompletionResult]::new('--api-key', '--api-key', [CompletionResultType]::ParameterName, 'Require `Authorization: Bearer KEY` on the API (passed to the engine as MET_API_KEY)')
            [CompletionResult]::new('--name', '--name', [CompletionResultType]::ParameterName, 'Name of the engine for ps/stop/logs [default: the recipe name]')
            [CompletionResult]::new('--image', '--image', [CompletionResultType]::ParameterName, 'Use this engine image instead of the recipe''s (e.g. one built locally)')
            [CompletionResult]::new('--ready-timeout', '--ready-timeout', [CompletionResultType]::ParameterName, 'Give up if the engine is not ready after this many seconds')
            [CompletionResult]::new('--print', '--print', [CompletionResultType]::ParameterName, 'Print the docker and native commands instead of running anything')
            [CompletionResult]::new('--native', '--native', [CompletionResultType]::ParameterName, 'Run `met` as a native process (found beside metralectl, then on PATH)')
            [CompletionResult]::new('--docker', '--docker', [CompletionResultType]::ParameterName, 'Run the engine image in a container through the Docker Engine')
            [CompletionResult]::new('-d', '-d', [CompletionResultType]::ParameterName, 'Return once the engine is ready and leave it running (`metralectl stop` ends it)')
            [CompletionResult]::new('--detach', '--detach', [CompletionResultType]::ParameterName, 'Return once the engine is ready and leave it running (`metralectl stop` ends it)')
            [CompletionResult]::new('--skip-checks', '--skip-checks', [CompletionResultType]::ParameterName, 'Start even when this machine lacks the GPU, memory or compute capability the recipe asks for, or the engine lacks what its model needs on its device (the checks run before any download)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'With --print: print JSON (see docs/recipes.md for its fields)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;top' {
            [CompletionResult]::new('--socket', '--socket', [CompletionResultType]::ParameterName, 'The engine''s metrics socket [default: the one `met serve` makes for --port]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Read `URL/v1/metrics/stream` instead (a remote engine or a container)')
            [CompletionResult]::new('--api-key', '--api-key', [CompletionResultType]::ParameterName, 'The engine''s API key, for --url')
            [CompletionResult]::new('--port', '--port', [CompletionResultType]::ParameterName, 'The engine''s port, to find its default socket [default: 8000]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;chat' {
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Talk to this OpenAI-compatible server instead (e.g. http://127.0.0.1:8000)')
            [CompletionResult]::new('--api-key', '--api-key', [CompletionResultType]::ParameterName, 'The engine''s API key')
            [CompletionResult]::new('--model', '--model', [CompletionResultType]::ParameterName, 'The model name to send [default: the first the server''s /v1/models lists]')
            [CompletionResult]::new('--system', '--system', [CompletionResultType]::ParameterName, 'A system message that starts the conversation (and survives /reset)')
            [CompletionResult]::new('--max-tokens', '--max-tokens', [CompletionResultType]::ParameterName, 'Most tokens a reply may have [default: the engine''s]')
            [CompletionResult]::new('--temperature', '--temperature', [CompletionResultType]::ParameterName, 'Sampling temperature [default: the model''s]')
            [CompletionResult]::new('--port', '--port', [CompletionResultType]::ParameterName, 'When the recipe is started for the chat: serve on this port instead of the recipe''s')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;doctor' {
            [CompletionResult]::new('--port', '--port', [CompletionResultType]::ParameterName, 'Check this port instead of the default (8000)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON: each check''s id, status, finding and fix')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;ps' {
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;stop' {
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Stop every running engine')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;logs' {
            [CompletionResult]::new('--tail', '--tail', [CompletionResultType]::ParameterName, 'Only the last N lines')
            [CompletionResult]::new('-f', '-f', [CompletionResultType]::ParameterName, 'Keep printing new lines until the engine stops (or Ctrl-C)')
            [CompletionResult]::new('--follow', '--follow', [CompletionResultType]::ParameterName, 'Keep printing new lines until the engine stops (or Ctrl-C)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;pull' {
            [CompletionResult]::new('--image', '--image', [CompletionResultType]::ParameterName, 'Pull this image instead of the recipe''s')
            [CompletionResult]::new('--no-image', '--no-image', [CompletionResultType]::ParameterName, 'Only the checkpoint (for native runs): do not pull the engine image')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;completions' {
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;bench' {
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Base URL of the OpenAI-compatible server (e.g. http://127.0.0.1:8000)')
            [CompletionResult]::new('--model', '--model', [CompletionResultType]::ParameterName, 'The model name to send [default: the first one the server''s /v1/models lists]')
            [CompletionResult]::new('--concurrency', '--concurrency', [CompletionResultType]::ParameterName, 'The ladder: concurrent requests of each rung, comma-separated')
            [CompletionResult]::new('--isl', '--isl', [CompletionResultType]::ParameterName, 'Prompt tokens a request, exactly')
            [CompletionResult]::new('--osl', '--osl', [CompletionResultType]::ParameterName, 'Generated tokens a request, exactly')
            [CompletionResult]::new('--reps', '--reps', [CompletionResultType]::ParameterName, 'Timed repetitions a rung')
            [CompletionResult]::new('--warmup', '--warmup', [CompletionResultType]::ParameterName, 'Untimed repetitions before the timed ones, a rung')
            [CompletionResult]::new('--seed', '--seed', [CompletionResultType]::ParameterName, 'Seed of the prompts and of the sampler')
            [CompletionResult]::new('--temperature', '--temperature', [CompletionResultType]::ParameterName, 'Sampling temperature')
            [CompletionResult]::new('--api-key', '--api-key', [CompletionResultType]::ParameterName, 'The server''s API key (sent as `Authorization: Bearer KEY`)')
            [CompletionResult]::new('--against', '--against', [CompletionResultType]::ParameterName, 'Run the same ladder against this second server too, alternating rep by rep, and report the ratio a rung')
            [CompletionResult]::new('--against-model', '--against-model', [CompletionResultType]::ParameterName, 'The model name to send to --against [default: the first one its /v1/models lists]')
            [CompletionResult]::new('--endpoint', '--endpoint', [CompletionResultType]::ParameterName, 'Which API to drive')
            [CompletionResult]::new('--request-timeout', '--request-timeout', [CompletionResultType]::ParameterName, 'Give up on a request after this many seconds (it counts as an error)')
            [CompletionResult]::new('--record', '--record', [CompletionResultType]::ParameterName, 'Write the run as a record (JSON, see docs/benchmarks.md)')
            [CompletionResult]::new('--response-format', '--response-format', [CompletionResultType]::ParameterName, 'Constrain every request to the measured server (not --against''s) with this `response_format`: `json_object`, or FILE holding a JSON schema (sent as `json_schema`). With the bench''s `ignore_eos` the server writes one value after another up to --osl. `--against` the same URL measures the free ladder beside it (the ratio is constrained / free)')
            [CompletionResult]::new('--sign', '--sign', [CompletionResultType]::ParameterName, 'Sign the record with this secret key (from `metralectl bench keygen`): writes FILE.minisig')
            [CompletionResult]::new('--streams', '--streams', [CompletionResultType]::ParameterName, 'Streams decoding at once; each sends its next request as soon as its last one ends')
            [CompletionResult]::new('--long-isl', '--long-isl', [CompletionResultType]::ParameterName, 'Prompt tokens of each long prompt')
            [CompletionResult]::new('--long-osl', '--long-osl', [CompletionResultType]::ParameterName, 'Generated tokens of each long prompt')
            [CompletionResult]::new('--long-every', '--long-every', [CompletionResultType]::ParameterName, 'Time between two long prompts'' arrivals (`1s`, `500ms`, `0.5s`, `2m`; a bare number is seconds)')
            [CompletionResult]::new('--duration', '--duration', [CompletionResultType]::ParameterName, 'How long each phase lasts: the baseline (streams alone), then the loaded one')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the record as JSON instead of a table')
            [CompletionResult]::new('--mixed', '--mixed', [CompletionResultType]::ParameterName, 'Run the mixed load instead of the ladder: --streams requests decoding continuously (ISL/OSL from --isl/--osl), first alone, then while a long prompt arrives every --long-every; reports the streams'' ITL in both phases and the long prompts'' TTFT')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('gate', 'gate', [CompletionResultType]::ParameterValue, 'Rerun a baseline record''s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens')
            [CompletionResult]::new('report', 'report', [CompletionResultType]::ParameterValue, 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records')
            [CompletionResult]::new('keygen', 'keygen', [CompletionResultType]::ParameterValue, 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;bench;gate' {
            [CompletionResult]::new('--baseline', '--baseline', [CompletionResultType]::ParameterName, 'The baseline record (e.g. bench/baselines/NAME.json)')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'The server to measure [default: the baseline''s URL]')
            [CompletionResult]::new('--api-key', '--api-key', [CompletionResultType]::ParameterName, 'The server''s API key (sent as `Authorization: Bearer KEY`)')
            [CompletionResult]::new('--model', '--model', [CompletionResultType]::ParameterName, 'Send this model name instead of the baseline''s (the same model served under another name)')
            [CompletionResult]::new('--tolerance', '--tolerance', [CompletionResultType]::ParameterName, 'How much slower than the baseline a rung may be, as a fraction')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;bench;report' {
            [CompletionResult]::new('--records', '--records', [CompletionResultType]::ParameterName, 'The directory of records')
            [CompletionResult]::new('--out', '--out', [CompletionResultType]::ParameterName, 'Where README.md and ladder.svg go')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;bench;keygen' {
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;bench;help' {
            [CompletionResult]::new('gate', 'gate', [CompletionResultType]::ParameterValue, 'Rerun a baseline record''s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens')
            [CompletionResult]::new('report', 'report', [CompletionResultType]::ParameterValue, 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records')
            [CompletionResult]::new('keygen', 'keygen', [CompletionResultType]::ParameterValue, 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;bench;help;gate' {
            break
        }
        'metralectl;bench;help;report' {
            break
        }
        'metralectl;bench;help;keygen' {
            break
        }
        'metralectl;bench;help;help' {
            break
        }
        'metralectl;sign' {
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'The secret key (from `metralectl bench keygen`, or `minisign -G -W`)')
            [CompletionResult]::new('--trusted-comment', '--trusted-comment', [CompletionResultType]::ParameterName, 'The signed comment [default: `timestamp:UNIX_TIME<TAB>file:NAME`, as minisign writes]')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;verify' {
            [CompletionResult]::new('--sig', '--sig', [CompletionResultType]::ParameterName, 'Its signature [default: FILE.minisig]')
            [CompletionResult]::new('--pubkey', '--pubkey', [CompletionResultType]::ParameterName, 'Trust only this public key (a KEYFILE.pub) [default: the keys built in: the release key and bench/keys/*.pub]')
            [CompletionResult]::new('--key', '--key', [CompletionResultType]::ParameterName, 'Trust only this public key (a KEYFILE.pub) [default: the keys built in: the release key and bench/keys/*.pub]')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;self' {
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('update', 'update', [CompletionResultType]::ParameterValue, 'Install the latest release (or --version) after checking its signature and hash')
            [CompletionResult]::new('uninstall', 'uninstall', [CompletionResultType]::ParameterValue, 'Remove metralectl, met and what the installer added to your shell profile')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;self;update' {
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Install this version (up or down) instead of the latest')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Where releases live: URL/download/vVERSION/ and URL/latest/download/')
            [CompletionResult]::new('--pubkey', '--pubkey', [CompletionResultType]::ParameterName, 'Trust this public key instead of the built-in release key (a mirror that signs its own releases; the tests)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'metralectl;self;uninstall' {
            [CompletionResult]::new('-y', '-y', [CompletionResultType]::ParameterName, 'Do not ask for confirmation')
            [CompletionResult]::new('--yes', '--yes', [CompletionResultType]::ParameterName, 'Do not ask for confirmation')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;self;help' {
            [CompletionResult]::new('update', 'update', [CompletionResultType]::ParameterValue, 'Install the latest release (or --version) after checking its signature and hash')
            [CompletionResult]::new('uninstall', 'uninstall', [CompletionResultType]::ParameterValue, 'Remove metralectl, met and what the installer added to your shell profile')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;self;help;update' {
            break
        }
        'metralectl;self;help;uninstall' {
            break
        }
        'metralectl;self;help;help' {
            break
        }
        'metralectl;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the recipes: built-in ones and yours')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Show everything a recipe pins, and whether it fits this machine')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively')
            [CompletionResult]::new('top', 'top', [CompletionResultType]::ParameterValue, 'Live dashboard of a running engine: throughput, batch, KV cache, every request')
            [CompletionResult]::new('chat', 'chat', [CompletionResultType]::ParameterValue, 'Talk to a model in the terminal: a running engine, or a recipe started for it')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token')
            [CompletionResult]::new('ps', 'ps', [CompletionResultType]::ParameterValue, 'List the running engines')
            [CompletionResult]::new('stop', 'stop', [CompletionResultType]::ParameterValue, 'Stop engines (a container is removed)')
            [CompletionResult]::new('logs', 'logs', [CompletionResultType]::ParameterValue, 'Show an engine''s log')
            [CompletionResult]::new('pull', 'pull', [CompletionResultType]::ParameterValue, 'Fetch a recipe''s engine image and Hub checkpoint ahead of time')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Write shell completions to stdout')
            [CompletionResult]::new('bench', 'bench', [CompletionResultType]::ParameterValue, 'Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md)')
            [CompletionResult]::new('sign', 'sign', [CompletionResultType]::ParameterValue, 'Sign a file (a release''s SHA256SUMS, a benchmark record): writes FILE.minisig')
            [CompletionResult]::new('verify', 'verify', [CompletionResultType]::ParameterValue, 'Check a signed file (a release''s SHA256SUMS, a benchmark record) against a trusted key')
            [CompletionResult]::new('self', 'self', [CompletionResultType]::ParameterValue, 'Update or remove this installation of metralectl and met')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;help;list' {
            break
        }
        'metralectl;help;show' {
            break
        }
        'metralectl;help;run' {
            break
        }
        'metralectl;help;top' {
            break
        }
        'metralectl;help;chat' {
            break
        }
        'metralectl;help;doctor' {
            break
        }
        'metralectl;help;ps' {
            break
        }
        'metralectl;help;stop' {
            break
        }
        'metralectl;help;logs' {
            break
        }
        'metralectl;help;pull' {
            break
        }
        'metralectl;help;completions' {
            break
        }
        'metralectl;help;bench' {
            [CompletionResult]::new('gate', 'gate', [CompletionResultType]::ParameterValue, 'Rerun a baseline record''s workload; fail when a rung is slower than the baseline by more than the tolerance, or when greedy outputs are not deterministic or leak special tokens')
            [CompletionResult]::new('report', 'report', [CompletionResultType]::ParameterValue, 'Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against concurrency per series) from the committed records')
            [CompletionResult]::new('keygen', 'keygen', [CompletionResultType]::ParameterValue, 'Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub')
            break
        }
        'metralectl;help;bench;gate' {
            break
        }
        'metralectl;help;bench;report' {
            break
        }
        'metralectl;help;bench;keygen' {
            break
        }
        'metralectl;help;sign' {
            break
        }
        'metralectl;help;verify' {
            break
        }
        'metralectl;help;self' {
            [CompletionResult]::new('update', 'update', [CompletionResultType]::ParameterValue, 'Install the latest release (or --version) after checking its signature and hash')
            [CompletionResult]::new('uninstall', 'uninstall', [CompletionResultType]::ParameterValue, 'Remove metralectl, met and what the installer added to your shell profile')
            break
        }
        'metralectl;help;self;update' {
            break
        }
        'metralectl;help;self;uninstall' {
            break
        }
        'metralectl;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
