
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
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Start a recipe (for now: print the exact commands with --print)')
            [CompletionResult]::new('top', 'top', [CompletionResultType]::ParameterValue, 'Live dashboard of a running engine: throughput, batch, KV cache, every request')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Write shell completions to stdout')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'metralectl;list' {
            [CompletionResult]::new('--vendor', '--vendor', [CompletionResultType]::ParameterName, 'Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA)')
            [CompletionResult]::new('--family', '--family', [CompletionResultType]::ParameterName, 'Only recipes of this model family (e.g. qwen3, qwen3.6)')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print JSON (see docs/recipes.md for its fields)')
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
            [CompletionResult]::new('--print', '--print', [CompletionResultType]::ParameterName, 'Print the docker and native commands instead of running anything')
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
        'metralectl;completions' {
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print only the result: no notes or warnings')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'metralectl;help' {
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the recipes: built-in ones and yours')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Show everything a recipe pins, and whether it fits this machine')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Start a recipe (for now: print the exact commands with --print)')
            [CompletionResult]::new('top', 'top', [CompletionResultType]::ParameterValue, 'Live dashboard of a running engine: throughput, batch, KV cache, every request')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Write shell completions to stdout')
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
        'metralectl;help;completions' {
            break
        }
        'metralectl;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
