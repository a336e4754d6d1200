"""`specnb export-head`: an EAGLE-3 head in the files a serving engine loads (``specnb.native.head_export``)."""

from __future__ import annotations

import argparse

from specnb.app.commands.command_table import command


def _args_export_head(p: argparse.ArgumentParser) -> None:
    p.add_argument("head", help="an EAGLE-3 head in the standard layout: smollm2-eagle3 (the embedded one; "
                                "smollm2-eagle is specnb's own layout and is refused) or a folder with config.json + "
                                "model.safetensors")
    p.add_argument("--format", required=True, metavar="FORMAT",
                   help="eagle3: the folder vLLM's \"method\": \"eagle3\" loads; gguf: the file llama-server's "
                        "--spec-type draft-eagle3 -md FILE loads (made by llama.cpp's own converter)")
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder to write into")
    p.add_argument("--verifier", default="smollm2-135m",
                   help="the verifier the head drafts for: embedded name or HF folder (default smollm2-135m)")


@command("export-head", "export an EAGLE-3 head for vLLM (--format eagle3) or llama-server (--format gguf)",
         _args_export_head)
def run_export_head(args: argparse.Namespace) -> dict:
    from specnb.native.head_export import export_head

    return export_head(args.head, args.format, args.out, verifier=args.verifier)
