"""``{hcomm-cli}``: the CLI reference, generated at build time from the argparse parsers ``hcomm`` runs.

One section per subcommand (and per ``hcomm sim`` subcommand): its description, its usage line as argparse
prints it, and one entry per option with its help text.  Nothing is copied by hand: a new option shows up
at the next build.
"""
from __future__ import annotations

import argparse
import importlib
from typing import Any, Dict, List

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_id


def _subparsers(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    formatter = parser._get_formatter()
    return formatter._expand_help(action)


def _paragraphs(text: str) -> List[nodes.Node]:
    return [nodes.paragraph(text=" ".join(p.split())) for p in text.strip().split("\n\n") if p.strip()]


class CliReference(SphinxDirective):
    """``{hcomm-cli}`` with ``:module:`` and ``:func:`` naming the function that builds the parser."""

    required_arguments = 0
    option_spec = {"module": directives.unchanged_required, "func": directives.unchanged_required}

    def run(self) -> List[nodes.Node]:
        module = importlib.import_module(self.options["module"])
        parser = getattr(module, self.options["func"])()
        return self._command(parser, parser.prog, top=True)

    def _command(self, parser: argparse.ArgumentParser, prog: str, top: bool = False) -> List[nodes.Node]:
        section = nodes.section(ids=[make_id(self.env, self.state.document, "cli", prog)])
        section += nodes.title(text=prog)
        if parser.description:
            section.extend(_paragraphs(parser.description))
        usage = parser.format_usage().strip()
        section += nodes.literal_block(usage, usage, language="text")
        rows = nodes.definition_list()
        for action in parser._actions:
            if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
                continue
            term = ", ".join(action.option_strings) if action.option_strings else (action.metavar or action.dest)
            if action.option_strings and action.nargs != 0:
                meta = action.metavar or action.dest.upper()
                term += " " + (" ".join(meta) if isinstance(meta, tuple) else str(meta))
            item = nodes.definition_list_item()
            item += nodes.term("", "", nodes.literal(text=term))
            definition = nodes.definition()
            text = _help(parser, action)
            if action.default not in (None, argparse.SUPPRESS, False) and action.option_strings \
                    and "%(default)" not in (action.help or "") and "default" not in text:
                text = f"{text} (default: {action.default})".strip()
            definition.extend(_paragraphs(text) or [nodes.paragraph(text="")])
            item += definition
            rows += item
        if rows.children:
            section += rows
        if parser.epilog:
            section += nodes.literal_block(parser.epilog, parser.epilog, language="text")
        for name, sub in _subparsers(parser).items():
            section.extend(self._command(sub, f"{prog} {name}" if top else sub.prog))
        return [section]


def setup(app: Any) -> Dict[str, Any]:
    app.add_directive("hcomm-cli", CliReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
