import json
import time
import sglang
from typing import Dict, Any, List
import torch

def prepare_prompts(requests_data: List[Dict[str, Any]], llm: sglang.Engine) -> tuple[List[str], List[Dict[str, Any]]]:
    prompts = []
    sampling_params_list = []
    
    for request in requests_data:
        messages = request['body']['messages']
        conversation = [{"role": msg["role"], "content": msg["content"]} for msg in messages]
        prompt = llm.get_tokenizer().apply_chat_template(
            conversation=conversation, tokenize=False, add_generation_prompt=True
        )
        prompts.append(str(prompt))
        
        sampling_params = {
            "max_new_tokens": request['body'].get('max_tokens', 2048),
            "temperature": request['body'].get('temperature', 0.7)
        }
        sampling_params_list.append(sampling_params)
    
    return prompts, sampling_params_list

def main():
    # Initialize model
    print("Initializing model...")
    llm = sglang.Engine(
        model_path="meta-llama/Meta-Llama-3.1-405B-Instruct-FP8",
        mem_fraction_static=0.8,
        tp_size=8
    )
    
    # Load requests
    print("Loading requests...")
    with open('mmlu_batch_requests.jsonl', 'r') as f:
        requests_d
