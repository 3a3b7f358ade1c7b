# A stand-in SGLang worker on SGLang's own server stack (FastAPI on uvicorn, from Debian's
# python3-fastapi and python3-uvicorn), for the router's upstream-transport tests. It serves
# the routes the tests use, not a model.
import asyncio
import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

app = FastAPI()


@app.get("/health")
async def health():
    return Response(status_code=200)


@app.get("/get_server_info")
async def server_info():
    return {"dp_size": 1, "model_path": "uvicorn-stand-in"}


@app.post("/generate")
async def generate(request: Request):
    if int(request.headers.get("content-length", "0")) > 1 << 20:
        # Refuse before reading the body, as SGLang's request limits do; uvicorn then closes.
        return JSONResponse({"error": {"message": "request too large"}}, status_code=413)
    body = await request.json()
    n = int(body.get("sampling_params", {}).get("max_new_tokens", 8))
    if body.get("stream"):
        async def events():
            for i in range(n):
                yield "data: " + json.dumps({"text": "t" * (i + 1), "meta_info": {"completion_tokens": i + 1}}) + "\n\n"
                if i % 4 == 0:
                    await asyncio.sleep(0)
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    return {"text": "t" * n, "meta_info": {"prompt_tokens": len(body.get("text", "")), "completion_tokens": n}}
