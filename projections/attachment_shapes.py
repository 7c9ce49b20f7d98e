"""An attachment in each provider's request shape: as a document (the shapes
in turn_shapes.py) and as JSON text (turn_json.py), or as a note naming it
where a format cannot carry it (docs/tools.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnledger.domain.json_text import dumps_compact, json_string
from turnledger.domain.parts import Attachment, attachment_of


def attachment_note(attachment: Attachment) -> str:
    """The text sent in place of an attachment a format cannot carry."""
    where = attachment.uri or attachment.file_id or "inline"
    name = f"{attachment.name} " if attachment.name else ""
    return (
        f"[attachment {name}({attachment.media_type}, "
        f"{attachment.byte_size} bytes): {where}]"
    )


def sent_as_note(wire_format: str, attachment: Attachment) -> bool:
    """Whether `wire_format` sends this attachment as a text note (see above)."""
    if wire_format == "openai-chat":
        return attachment.uri is not None and not attachment.is_image
    if wire_format == "anthropic-messages":
        return not attachment.is_image and attachment.media_type != "application/pdf"
    return False


def data_url(attachment: Attachment) -> str:
    return f"data:{attachment.media_type};base64,{attachment.data_base64()}"


def chat_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.is_image and attachment.file_id is None:
        url = attachment.uri if attachment.uri is not None else data_url(attachment)
        return {"type": "image_url", "image_url": {"url": url}}
    if attachment.file_id is not None:
        return {"type": "file", "file": {"file_id": attachment.file_id}}
    if attachment.data is not None:
        return {
            "type": "file",
            "file": {
                "filename": attachment.name or "attachment",
                "file_data": data_url(attachment),
            },
        }
    return {"type": "text", "text": attachment_note(attachment)}


def responses_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.is_image:
        part: dict[str, Any] = {"type": "input_image"}
        if attachment.file_id is not None:
            part["file_id"] = attachment.file_id
        else:
            part["image_url"] = (
                attachment.uri if attachment.uri is not None else data_url(attachment)
            )
        part["detail"] = "auto"
        return part
    if attachment.file_id is not None:
        return {"type": "input_file", "file_id": attachment.file_id}
    if attachment.uri is not None:
        return {"type": "input_file", "file_url": attachment.uri}
    return {
        "type": "input_file",
        "filename": attachment.name or "attachment",
        "file_data": data_url(attachment),
    }


def anthropic_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.is_image:
        kind = "image"
    elif attachment.media_type == "application/pdf":
        kind = "document"
    else:
        return {"type": "text", "text": attachment_note(attachment)}
    if attachment.file_id is not None:
        source: dict[str, Any] = {"type": "file", "file_id": attachment.file_id}
    elif attachment.uri is not None:
        source = {"type": "url", "url": attachment.uri}
    else:
        source = {
            "type": "base64",
            "media_type": attachment.media_type,
            "data": attachment.data_base64(),
        }
    return {"type": kind, "source": source}


def gemini_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.data is not None:
        return {
            "inlineData": {
                "mimeType": attachment.media_type,
                "data": attachment.data_base64(),
            }
        }
    return {
        "fileData": {
            "mimeType": attachment.media_type,
            "fileUri": attachment.uri or attachment.file_id,
        }
    }


# As JSON text: an image by URL (the usual one) is written out, any other is
# made from its document, built as the shape above and serialized.


def _image_url(attachment: Mapping[str, Any]) -> str | None:
    """The URL of an image by URL, as JSON text; None for any other."""
    uri = attachment.get("uri")
    if uri is None or not attachment["media_type"].startswith("image/"):
        return None
    return json_string(uri)


def chat_attachment_text(attachment: Mapping[str, Any]) -> str:
    url = _image_url(attachment)
    if url is not None:
        return f'{{"type":"image_url","image_url":{{"url":{url}}}}}'
    return dumps_compact(chat_attachment(attachment_of(attachment)))


def responses_attachment_text(attachment: Mapping[str, Any]) -> str:
    url = _image_url(attachment)
    if url is not None:
        return f'{{"type":"input_image","image_url":{url},"detail":"auto"}}'
    return dumps_compact(responses_attachment(attachment_of(attachment)))


def anthropic_attachment_text(attachment: Mapping[str, Any]) -> str:
    url = _image_url(attachment)
    if url is not None:
        return f'{{"type":"image","source":{{"type":"url","url":{url}}}}}'
    return dumps_compact(anthropic_attachment(attachment_of(attachment)))


def gemini_attachment_text(attachment: Mapping[str, Any]) -> str:
    uri = attachment.get("uri")
    if uri is not None:
        media_type = json_string(attachment["media_type"])
        file_uri = json_string(uri)
        return f'{{"fileData":{{"mimeType":{media_type},"fileUri":{file_uri}}}}}'
    return dumps_compact(gemini_attachment(attachment_of(attachment)))
