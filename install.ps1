# Metrale installer (PowerShell). Installs metralectl and met from a signed release:
#
#   irm https://github.com/metrale/metrale/releases/latest/download/install.ps1 | iex
#   & ([scriptblock]::Create((irm https://github.com/metrale/metrale/releases/latest/download/install.ps1))) -Version 0.2.0 -Yes
#
# Step for step the same as install.sh (docs/install.md): it fails closed. SHA256SUMS must carry
# a valid minisign signature by the release key below, the archive must match its line in
# SHA256SUMS (Get-FileHash), and nothing is unpacked or installed before both hold.
#
# Everything lives in functions and the last line calls Main inside a block: PowerShell parses
# the whole script before running it, so a download cut short anywhere is a parse error and
# runs nothing.
#
# Untested here: this build machine has no PowerShell (see docs/install.md). Keep it in step
# with install.sh.
param(
    [string]$Version = '',
    [switch]$Yes,
    [switch]$NoModifyPath,
    [switch]$Uninstall
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

# The release public key (keys/release.pub, minisign format).
$MetraleReleasePubkey = 'RWTJiwzENtlQyxgPMm6tLlI02g2OK4+Jr4KcRJV6BtCpvy99SLyBhoWX'
$DefaultBaseUrl = 'https://github.com/metrale/metrale/releases'

function Write-Step([string]$Message) {
    [Console]::Error.WriteLine("metrale-install: $Message")
}

function Stop-Install([string]$Message) {
    throw "metrale-install: error: $Message"
}

# Asks a yes/no question when there is someone to ask (the default is yes).
function Confirm-Step([string]$Question) {
    if ($Yes -or -not [Environment]::UserInteractive -or [Console]::IsInputRedirected) { return }
    $answer = Read-Host "metrale-install: $Question [Y/n]"
    if ($answer -and $answer -notmatch '^(y|Y|yes)$') { Stop-Install 'cancelled; nothing was changed' }
}

function Get-Target {
    if ([Environment]::OSVersion.Platform -ne [PlatformID]::Win32NT) {
        Stop-Install 'this is not Windows: run install.sh instead (docs/install.md)'
    }
    $arch = [System.Runtime.InteropServices.RuntimeInformation]::OSArchitecture.ToString()
    switch ($arch) {
        'X64' { return 'x86_64-pc-windows-msvc' }
        'Arm64' { return 'aarch64-pc-windows-msvc' }
        default { Stop-Install "unsupported CPU architecture '$arch': releases are built for x86_64 and aarch64; build from source instead (docs/install.md)" }
    }
}

# HTTPS, or HTTP to a loopback address only (how tests serve releases).
function Get-BaseUrl {
    $base = if ($env:METRALE_DOWNLOAD_URL) { $env:METRALE_DOWNLOAD_URL } else { $DefaultBaseUrl }
    $base = $base.TrimEnd('/')
    if ($base -match '^https://') { return $base }
    if ($base -match '^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?(/.*)?$') { return $base }
    Stop-Install "refusing to download from '$base': only https:// URLs are allowed (plain http:// only to 127.0.0.1, localhost or [::1])"
}

function Invoke-Download([string]$Url, [string]$Path) {
    [Net.ServicePointManager]::SecurityProtocol = [Net.SecurityProtocolType]::Tls12 -bor [Net.SecurityProtocolType]::Tls13
    try {
        Invoke-WebRequest -Uri $Url -OutFile $Path -UseBasicParsing -MaximumRedirection 5
    } catch {
        Stop-Install "cannot download ${Url}: $($_.Exception.Message)"
    }
}

# The hash SHA256SUMS lists for Name, or $null.
function Get-SumsHash([string]$Sums, [string]$Name) {
    foreach ($line in Get-Content -LiteralPath $Sums) {
        $fields = $line -split '\s+', 2
        if ($fields.Count -eq 2 -and ($fields[1] -eq $Name -or $fields[1] -eq "*$Name")) {
            return $fields[0].ToLowerInvariant()
        }
    }
    return $null
}

function Assert-Hash([string]$Path, [string]$Expected) {
    $got = (Get-FileHash -Algorithm SHA256 -LiteralPath $Path).Hash.ToLowerInvariant()
    if ($got -ne $Expected) {
        Stop-Install "$(Split-Path -Leaf $Path) has SHA-256 $got but the signed SHA256SUMS says ${Expected}: the download is corrupt or was tampered with; nothing was installed"
    }
}

# Verifies SHA256SUMS against the release key and returns the signed release version.
function Confirm-Signature([string]$Tmp, [string]$Url, [string]$Target) {
    $sums = Join-Path $Tmp 'SHA256SUMS'
    $sig = Join-Path $Tmp 'SHA256SUMS.minisig'
    $pub = Join-Path $Tmp 'release.pub'
    Set-Content -LiteralPath $pub -Value @('untrusted comment: Metrale release key', $MetraleReleasePubkey)
    $minisign = Get-Command minisign -ErrorAction SilentlyContinue
    if ($minisign) {
        Write-Step 'checking the signature with minisign'
        & $minisign.Source -V -q -p $pub -m $sums -x $sig
        if ($LASTEXITCODE -ne 0) { Stop-Install 'SHA256SUMS does not carry a valid signature by the release key; nothing was installed' }
    } else {
        Write-Step "checking the signature with the release's metralectl (no minisign here)"
        $name = "metralectl-$Target.exe"
        $expected = Get-SumsHash $sums $name
        if (-not $expected) { Stop-Install "no minisign here, and this release has no $name to check its signature with: install minisign and rerun" }
        $checker = Join-Path $Tmp $name
        Invoke-Download "$Url/$name" $checker
        Assert-Hash $checker $expected
        & $checker --quiet verify $sums --sig $sig --pubkey $pub | Out-Null
        if ($LASTEXITCODE -ne 0) { Stop-Install 'SHA256SUMS does not carry a valid signature by the release key (see the message above); nothing was installed' }
    }
    $comment = (Get-Content -LiteralPath $sig | Where-Object { $_ -like 'trusted comment: *' } | Select-Object -First 1)
    if (-not $comment -or $comment -notmatch '^trusted comment: metrale release (\S+)$') {
        Stop-Install "the signed SHA256SUMS does not name a release (trusted comment '$comment'); nothing was installed"
    }
    $release = $Matches[1]
    if ($Version -and $release -ne $Version) {
        Stop-Install "asked for $Version but $Url holds a release signed as $release; nothing was installed"
    }
    return $release
}

function Get-ReceiptPath {
    return Join-Path $env:LOCALAPPDATA 'Metrale\install-receipt'
}

function Install-Metrale {
    $target = Get-Target
    $base = Get-BaseUrl
    $script:Version = $Version.TrimStart('v')
    if ($Version -match '[^0-9A-Za-z.+-]') { Stop-Install "'$Version' is not a version (e.g. -Version 0.2.0)" }
    $url = if ($Version) { "$base/download/v$Version" } else { "$base/latest/download" }
    $dir = if ($env:METRALE_INSTALL_DIR) { $env:METRALE_INSTALL_DIR.TrimEnd('\') } else { Join-Path $env:LOCALAPPDATA 'Metrale\bin' }
    Confirm-Step "install Metrale $(if ($Version) { $Version } else { '(latest)' }) for $target into ${dir}?"

    $tmp = Join-Path ([IO.Path]::GetTempPath()) ("metrale-install." + [Guid]::NewGuid().ToString('N'))
    New-Item -ItemType Directory -Path $tmp | Out-Null
    try {
        Write-Step "downloading the release list from $url"
        Invoke-Download "$url/SHA256SUMS" (Join-Path $tmp 'SHA256SUMS')
        Invoke-Download "$url/SHA256SUMS.minisig" (Join-Path $tmp 'SHA256SUMS.minisig')
        $release = Confirm-Signature $tmp $url $target

        $archive = "metrale-$target.tar.gz"
        $expected = Get-SumsHash (Join-Path $tmp 'SHA256SUMS') $archive
        if (-not $expected) { Stop-Install "release $release has no build for $target; build from source instead (docs/install.md)" }
        Write-Step "downloading $archive ($release)"
        $archivePath = Join-Path $tmp $archive
        Invoke-Download "$url/$archive" $archivePath
        Assert-Hash $archivePath $expected

        $unpack = Join-Path $tmp 'unpack'
        New-Item -ItemType Directory -Path $unpack | Out-Null
        tar -xzf $archivePath -C $unpack
        if ($LASTEXITCODE -ne 0) { Stop-Install "cannot unpack $archive; nothing was installed" }
        $src = Join-Path $unpack "metrale-$target"
        foreach ($bin in 'metralectl.exe', 'met.exe') {
            if (-not (Test-Path -LiteralPath (Join-Path $src $bin) -PathType Leaf)) {
                Stop-Install "the archive has no metrale-$target/$bin; nothing was installed"
            }
        }
        $createdDir = -not (Test-Path -LiteralPath $dir)
        New-Item -ItemType Directory -Force -Path $dir | Out-Null
        foreach ($bin in 'metralectl.exe', 'met.exe') {
            $staged = Join-Path $dir ".$bin.metrale-tmp"
            Copy-Item -LiteralPath (Join-Path $src $bin) -Destination $staged -Force
            Move-Item -LiteralPath $staged -Destination (Join-Path $dir $bin) -Force
        }

        $addedPath = $false
        $receipt = Get-ReceiptPath
        if (Test-Path -LiteralPath $receipt) {
            $addedPath = [bool](Select-String -LiteralPath $receipt -Pattern '^path-entry=' -Quiet)
        }
        $userPath = [Environment]::GetEnvironmentVariable('Path', 'User')
        $entries = if ($userPath) { $userPath -split ';' } else { @() }
        if (-not $NoModifyPath -and $entries -notcontains $dir) {
            [Environment]::SetEnvironmentVariable('Path', (@($entries) + $dir | Where-Object { $_ }) -join ';', 'User')
            $addedPath = $true
            Write-Step "added $dir to your user PATH (open a new terminal to use it)"
        }
        New-Item -ItemType Directory -Force -Path (Split-Path -Parent $receipt) | Out-Null
        $lines = @(
            '# What the Metrale installer added; install.ps1 -Uninstall removes exactly this.',
            "version=$release",
            "file=$(Join-Path $dir 'metralectl.exe')",
            "file=$(Join-Path $dir 'met.exe')"
        )
        if ($addedPath) { $lines += "path-entry=$dir" }
        if ($createdDir) { $lines += "dir=$dir" }
        Set-Content -LiteralPath "$receipt.tmp" -Value $lines
        Move-Item -LiteralPath "$receipt.tmp" -Destination $receipt -Force
        Write-Step "installed metralectl and met $release ($target) into $dir"
    } finally {
        Remove-Item -LiteralPath $tmp -Recurse -Force -ErrorAction SilentlyContinue
    }
}

function Uninstall-Metrale {
    $receipt = Get-ReceiptPath
    if (-not (Test-Path -LiteralPath $receipt)) {
        Stop-Install "no install receipt at $receipt, so nothing to uninstall (installed another way? run: metralectl self uninstall)"
    }
    Confirm-Step "remove Metrale (the files and PATH entry listed in $receipt)?"
    foreach ($line in Get-Content -LiteralPath $receipt) {
        if ($line -match '^file=(.*)$') {
            $file = $Matches[1]
            if ((Split-Path -Leaf $file) -in 'metralectl.exe', 'met.exe' -and (Test-Path -LiteralPath $file)) {
                Remove-Item -LiteralPath $file -Force
                Write-Step "removed $file"
            }
        } elseif ($line -match '^path-entry=(.*)$') {
            $entry = $Matches[1]
            $userPath = [Environment]::GetEnvironmentVariable('Path', 'User')
            if ($userPath) {
                $kept = ($userPath -split ';') | Where-Object { $_ -and $_ -ne $entry }
                [Environment]::SetEnvironmentVariable('Path', ($kept -join ';'), 'User')
                Write-Step "removed $entry from your user PATH"
            }
        } elseif ($line -match '^dir=(.*)$') {
            $d = $Matches[1]
            if ((Test-Path -LiteralPath $d) -and -not (Get-ChildItem -LiteralPath $d -Force)) {
                Remove-Item -LiteralPath $d -Force
            }
        }
    }
    Remove-Item -LiteralPath $receipt -Force
    Write-Step 'uninstalled'
}

function Main {
    if ($Uninstall) { Uninstall-Metrale } else { Install-Metrale }
}

if ($true) { Main }
